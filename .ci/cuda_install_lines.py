"""pdc-cuda's two install lines (docs/cuda-backend.md, "Installing"), checked with pip's resolver.

    python .ci/cuda_install_lines.py

pdc-cuda depends on CUDA 12's CuPy and driver bindings (``cupy-cuda12x``,
``cuda-bindings`` 12). A CUDA 13 environment installs the documented CUDA 13
dependencies and then pdc-cuda with ``--no-deps``: CuPy's distributions for CUDA 12 and
13 write the same ``cupy`` package, and no extra can remove a requirement of the base.

The script builds the pdc-core and pdc-cuda wheels from this tree and asks pip what each
line would install (``pip install --dry-run --ignore-installed --report``: the resolver
as in an empty environment; it reads metadata from the package index and installs
nothing). A CUDA 13 environment is the same request with ``cupy-cuda13x`` in it. It
checks that

- the CUDA 12 line (``pdc-core pdc-cuda``, and with the ``nvrtc`` and ``numba`` extras)
  brings ``cupy-cuda12x`` and ``cuda-bindings`` 12, and nothing of CUDA 13;
- the CUDA 13 line, read from the documentation, holds pdc-cuda's own requirements with
  the CUDA 12 ones swapped for CUDA 13 (:func:`expected_cuda13_requirements`), brings
  ``cupy-cuda13x`` and ``cuda-bindings`` 13 and nothing of CUDA 12, also with its two
  optional additions, and its ``--no-deps`` step installs pdc-cuda alone;
- a plain ``pdc-cuda`` beside ``cupy-cuda13x`` still brings ``cupy-cuda12x`` too (the
  reason for the CUDA 13 line: when it stops, the documentation is stale).

Prints what each request would install; the exit status is 1 when any check failed.
Needs the package index, so it is not part of .ci/run.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugins" / "pdc_cuda"
GUIDE = ROOT / "docs" / "cuda-backend.md"

#: pdc-cuda's CUDA 12 requirements and what the CUDA 13 line has instead.
CUDA13_INSTEAD = {"cupy-cuda12x": "cupy-cuda13x>=14", "cuda-bindings": "cuda-bindings>=13,<14"}
#: The optional additions the CUDA 13 line names (NVRTC; Python kernel bodies).
CUDA13_OPTIONAL = ("cuda-toolkit[nvrtc]==13.*", "numba-cuda[cu13]>=0.30", "numpy<2.5")

#: Distributions whose major version is the CUDA major they are for (besides the
#: ``nvidia-cuda-*`` wheels; CUDA 12's have a ``-cu12`` suffix instead).
CUDA_VERSIONED = ("cuda-bindings", "cuda-toolkit", "nvidia-nvjitlink", "nvidia-nvvm")

_NAME = re.compile(r"^[A-Za-z0-9._-]+")


def requirement_name(requirement: str) -> str:
    """``'cuda-bindings>=12.4,<13'`` -> ``'cuda-bindings'``."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return match.group(0).lower()


def expected_cuda13_requirements() -> list[str]:
    """pdc-cuda's base requirements with each CUDA 12 one swapped for its CUDA 13 one."""
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text(encoding="utf-8"))
    requirements: list[str] = project["project"]["dependencies"]
    names = {requirement_name(requirement) for requirement in requirements}
    missing = set(CUDA13_INSTEAD) - names
    if missing:
        raise ValueError(f"pdc-cuda no longer requires {sorted(missing)}: update this script")
    return [CUDA13_INSTEAD.get(requirement_name(r), r) for r in requirements]


def documented_cuda13_line(text: str) -> tuple[list[str], list[str]]:
    """The requirements of the guide's CUDA 13 line, and its ``--no-deps`` step."""
    section = text.split("In a CUDA 13 environment", 1)[-1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    if block is None:
        raise ValueError(f"{GUIDE.name}: no sh block after 'In a CUDA 13 environment'")
    commands = [shlex.split(line) for line in block.group(1).splitlines() if line[:1] != "#"]
    if len(commands) != 2 or any(command[:2] != ["pip", "install"] for command in commands):
        raise ValueError(f"{GUIDE.name}: the CUDA 13 line is not two pip install commands")
    return commands[0][2:], commands[1][2:]


def would_install(arguments: Sequence[str], report: Path) -> dict[str, str]:
    """``{name: version}`` of what ``pip install ARGUMENTS`` would install, from nothing."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    command += ["--quiet", "--report", str(report), *arguments]
    subprocess.run(command, check=True)
    installs = json.loads(report.read_text(encoding="utf-8"))["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installs}


def cuda_majors(installs: dict[str, str]) -> dict[str, str]:
    """Which CUDA major each CUDA-versioned distribution is for: ``{name: "12" | "13"}``."""
    majors = {}
    for name, version in installs.items():
        if name.startswith("cupy-cuda"):
            majors[name] = name.removeprefix("cupy-cuda")[:2]
        elif name.endswith("-cu12"):
            majors[name] = "12"
        elif name in CUDA_VERSIONED or name.startswith("nvidia-cuda-"):
            majors[name] = version.split(".")[0]
    return majors


def main() -> int:
    failures: list[str] = []

    def check(condition: bool, message: str) -> None:
        print(f"  {'ok' if condition else 'FAILED'}: {message}")
        if not condition:
            failures.append(message)

    with tempfile.TemporaryDirectory(prefix="pdc-cuda-install-lines-") as temporary:
        work = Path(temporary)
        print("+ pip wheel --no-deps . plugins/pdc_cuda", flush=True)
        build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
        subprocess.run([*build, "--wheel-dir", str(work), str(ROOT), str(PLUGIN)], check=True)
        core = f"pdc-core @ {next(work.glob('pdc_core-*.whl')).as_uri()}"
        cuda_wheel = next(work.glob("pdc_cuda-*.whl"))
        cuda = cuda_wheel.as_uri()

        def request(label: str, arguments: list[str]) -> dict[str, str]:
            shown = " ".join(arguments).replace(work.as_uri() + "/", "").replace(f"{work}/", "")
            print(f"+ {label}: pip install {shown}", flush=True)
            installs = would_install(arguments, work / "report.json")
            majors = cuda_majors(installs)
            print("  would install " + ", ".join(f"{n} {v}" for n, v in sorted(installs.items())))
            return majors

        for label, plugin in (("CUDA 12", "pdc-cuda"), ("CUDA 12", "pdc-cuda[nvrtc,numba]")):
            majors = request(label, [core, f"{plugin} @ {cuda}"])
            check(majors.get("cupy-cuda12x") == "12", "cupy-cuda12x is installed")
            check(majors.get("cuda-bindings") == "12", "cuda-bindings 12 is installed")
            check("13" not in majors.values(), f"nothing of CUDA 13: {majors}")

        line, no_deps = documented_cuda13_line(GUIDE.read_text(encoding="utf-8"))
        check(line == expected_cuda13_requirements(), f"the guide's CUDA 13 line is {line}")
        check(no_deps == ["--no-deps", "pdc-cuda"], f"its second step is {no_deps}")
        core_line = [core if requirement_name(r) == "pdc-core" else r for r in line]
        for label, arguments in (
            ("CUDA 13", core_line),
            ("CUDA 13 with the optional additions", [*core_line, *CUDA13_OPTIONAL]),
        ):
            majors = request(label, arguments)
            check(majors.get("cupy-cuda13x") == "13", "cupy-cuda13x is installed")
            check(majors.get("cuda-bindings") == "13", "cuda-bindings 13 is installed")
            check("12" not in majors.values(), f"nothing of CUDA 12: {majors}")
        print(f"+ CUDA 13, second step: pip install --no-deps {cuda_wheel.name}", flush=True)
        alone = would_install(["--no-deps", str(cuda_wheel)], work / "report.json")
        check(list(alone) == ["pdc-cuda"], f"pdc-cuda alone: {sorted(alone)}")

        majors = request(
            "a plain pdc-cuda beside cupy-cuda13x", ["cupy-cuda13x", core, str(cuda_wheel)]
        )
        check(
            {"cupy-cuda12x", "cupy-cuda13x"} <= set(majors),
            "it still brings cupy-cuda12x beside cupy-cuda13x (why the CUDA 13 line exists)",
        )

    if failures:
        print(f"cuda_install_lines: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("cuda_install_lines: both install lines resolve as documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
