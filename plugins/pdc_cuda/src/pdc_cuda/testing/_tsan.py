"""ThreadSanitizer runs of host-built ring kernels, driven by a C++ host side.

Python's host side stores ring words with NumPy, which ThreadSanitizer does not see, so
the kernels are driven by ``host/tsan_driver.cpp`` instead: the ring protocol's host
rows in C++ atomics (``docs/ring-protocol.md`` section 5), built with
``-fsanitize=thread`` like the kernels. :func:`tsan_single` and :func:`tsan_pipeline`
render the kernels exactly as the cuda backend does (through its launch path's
:func:`pdc_cuda._persistent.render_kernel`, see ``_plan``), build them for
TSan, write the plan and run the driver in a subprocess; :class:`TsanRun` holds its
exit status and one line per TSan report (kind, then each access's first frame in
the kernel or the driver, with its source line).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from pdc_core import PersistentKernel, PersistentPipeline
from pdc_core.backend import RingLayout, RingMemory

from .._ring_source import _constants
from ._build import HEADER_DIR, TSAN_FLAGS, HostBuild, cache_dir, compiler
from ._plan import PlannedBuild, kernel_builds, pipeline_builds, prebuild

__all__ = [
    "RECORD",
    "TsanRun",
    "build_driver",
    "summarize_reports",
    "tsan_pipeline",
    "tsan_pipeline_builds",
    "tsan_single",
    "tsan_single_builds",
]

#: The driver's records: ``(id: u64, x: f64)``.
RECORD = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)

Scenario = Literal["drain", "now", "error"]

#: TSan's options for the driver: every report, then a distinct exit status.
TSAN_OPTIONS = "halt_on_error=0:exitcode=66:report_signal_unsafe=0:history_size=4"


_driver_lock = threading.Lock()


def build_driver() -> Path:
    """The TSan build of ``host/tsan_driver.cpp`` (cached by hash)."""
    with _driver_lock:
        return _build_driver()


def _build_driver() -> Path:
    found = compiler()
    if found is None:
        raise RuntimeError("no C++20 compiler")
    path, version = found
    source = (HEADER_DIR / "tsan_driver.cpp").read_text(encoding="utf-8")
    constants = _constants() + "\n"
    flags = ("-std=c++20", "-O1", "-g", "-pthread", *TSAN_FLAGS)
    key = hashlib.sha256(repr((source, constants, path, version, flags)).encode()).hexdigest()[:32]
    output = cache_dir() / f"tsan-driver-{key}"
    if not output.exists():
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix="build-") as work:
            (Path(work) / "pdc_ring_constants.h").write_text(constants, encoding="utf-8")
            built = Path(work) / "driver"
            command = [
                path,
                *flags,
                "-I",
                work,
                str(HEADER_DIR / "tsan_driver.cpp"),
                "-o",
                str(built),
                "-ldl",
            ]
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                raise RuntimeError("the TSan driver does not build:\n" + result.stderr[-6000:])
            os.replace(built, output)
    return output


@dataclass
class TsanRun:
    """One driver run: its exit status, output, and one line per TSan report."""

    returncode: int
    output: str
    reports: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.reports


_FRAME = re.compile(r"^\s+#(\d+) (\S+) (\S+?):(\d+)(?::\d+)? \((\S+?)\+0x[0-9a-f]+\)")


def summarize_reports(stderr: str, sources: dict[str, str]) -> list[str]:
    """One line per TSan report in ``stderr``: its kind, then for each access (or
    other event the report lists before its thread and location notes) the first frame
    outside the system headers, as ``file:line in function `source text``` (kernel
    frames are looked up in ``sources``, rendered text by shared-object name)."""
    reports = []
    for block in stderr.split("==================")[1:]:
        lines = block.strip().splitlines()
        if not lines or not lines[0].startswith("WARNING: ThreadSanitizer:"):
            continue
        kind = lines[0].split("ThreadSanitizer:", 1)[1].split("(pid")[0].strip()
        places: list[str] = []
        looking = False
        for text in lines[1:]:
            if text.startswith("  ") and not text.startswith("    "):
                # a section: an access ("Read of size 8 ... by thread T1:") or a note
                note = text.strip().startswith(("Location is", "Thread T", "Mutex", "SUMMARY"))
                looking = not note
                continue
            match = _FRAME.match(text)
            if not looking or match is None:
                continue
            _, function, file, line, module = match.groups()
            if file.startswith("/usr/") or "/libsanitizer/" in file:
                continue
            looking = False
            code = ""
            source = sources.get(Path(module).name)
            if source is not None and file.endswith(".cu"):
                rendered = source.split("\n")
                number = int(line)
                if 1 <= number <= len(rendered):
                    code = " `" + rendered[number - 1].strip() + "`"
            places.append(f"{Path(file).name}:{line} in {function}{code}")
        reports.append(f"{kind}: " + " / ".join(places))
    return reports


def _run(
    builds: Sequence[HostBuild],
    regions: Sequence[tuple[str, RingMemory, int]],
    wiring: Sequence[tuple[str, str]],
    threads: int,
    scenario: str,
    timeout: float,
) -> TsanRun:
    driver = build_driver()
    with tempfile.TemporaryDirectory(prefix="pdc-tsan-") as work:
        plan = []
        for name, memory, rank in regions:
            image = Path(work) / f"{name}.bin"
            image.write_bytes(memory.base.tobytes())
            offset = memory.layout.in_sequence_offset
            plan.append(f"region {name} {image} {rank} {-1 if offset is None else offset}")
        copies: dict[str, str] = {}
        for index, (build, (source, target)) in enumerate(zip(builds, wiring, strict=True)):
            # a copy per stage: each block has its own __shared__ variables
            copy = Path(work) / f"stage{index}-{build.path.name}"
            copy.write_bytes(build.path.read_bytes())
            copies[copy.name] = build.source
            plan.append(f"stage {copy} {source} {target} {threads}")
        plan.append(f"scenario {scenario}")
        (Path(work) / "plan").write_text("\n".join(plan) + "\n", encoding="utf-8")
        environment = {**os.environ, "TSAN_OPTIONS": TSAN_OPTIONS}
        result = subprocess.run(
            [str(driver), str(Path(work) / "plan")],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
        )
    return TsanRun(
        result.returncode,
        result.stdout + result.stderr,
        summarize_reports(result.stderr, copies),
    )


def _scenario(kind: Scenario, count: int, mul: float, add: float, code: int, part: str) -> str:
    return f"{kind} {count} {mul!r} {add!r} {code} {part.replace(' ', '_') or '-'}"


def tsan_single_builds(source: str, *, threads: int, capacity: int = 16) -> list[PlannedBuild]:
    """The TSan build :func:`tsan_single` runs (for :func:`~pdc_cuda.testing.prebuild`)."""
    kernel = PersistentKernel("tsan", RECORD, RECORD, capacity=capacity)
    kernel.add_body("cuda", source)
    return kernel_builds(kernel, sanitize=True, threads=threads)


def tsan_single(
    source: str,
    *,
    threads: int,
    scenario: Scenario,
    count: int,
    mul: float,
    add: float,
    error: tuple[int, str] = (0, ""),
    capacity: int = 16,
    timeout: float = 300,
) -> TsanRun:
    """One kernel of its own (sequenced input slots, as the cuda backend lays out its
    rings) with CUDA body ``source`` over :data:`RECORD`, under TSan."""
    layout = RingLayout(RECORD, RECORD, capacity, sequenced_input=True)
    builds = prebuild(tsan_single_builds(source, threads=threads, capacity=capacity))
    memory = RingMemory.from_buffer(layout)
    return _run(
        builds, [("host", memory, 3)], [("host", "host")], threads,
        _scenario(scenario, count, mul, add, *error), timeout,
    )  # fmt: skip


def tsan_pipeline_builds(pipeline: PersistentPipeline, *, threads: int) -> list[PlannedBuild]:
    """The TSan builds :func:`tsan_pipeline` runs (for :func:`~pdc_cuda.testing.prebuild`)."""
    return pipeline_builds(pipeline, sanitize=True, threads=threads)


def tsan_pipeline(
    pipeline: PersistentPipeline,
    *,
    threads: int,
    scenario: Scenario,
    count: int,
    mul: float,
    add: float,
    error: tuple[int, str] = (0, ""),
    timeout: float = 300,
) -> TsanRun:
    """A pipeline of :data:`RECORD` stages on one device (links in device memory at
    device scope, the host region sequenced and system scope), under TSan."""
    stages = pipeline.stages
    count_stages = len(stages)
    builds = prebuild(tsan_pipeline_builds(pipeline, threads=threads))
    host = RingMemory.from_buffer(
        RingLayout(RECORD, RECORD, stages[0].capacity, stages[-1].capacity, sequenced_input=True)
    )
    regions = [("host", host, 3)] + [
        (f"link{index}", RingMemory.from_buffer(pipeline.link_layout(index)), 2)
        for index in range(1, count_stages)
    ]
    names = ["host"] + [f"link{index}" for index in range(1, count_stages)]
    connections = [
        (names[index], names[index + 1] if index + 1 < count_stages else "host")
        for index in range(count_stages)
    ]
    return _run(
        builds, regions, connections, threads, _scenario(scenario, count, mul, add, *error), timeout
    )
