"""pdc from this tree without installing it: a ``.dist-info`` folder per distribution.

pdc finds its backends only through entry points, which a bare checkout on
``PYTHONPATH`` lacks. This writes into a folder the metadata that declares them
(``pdc = pdc_core._cli:main``; ``[pdc] cpu = pdc_cpu``; ``[pdc] cuda = pdc_cuda``, or
another module standing in for pdc-cuda) and prints what goes first on ``PYTHONPATH``:
the folder, then ``src/`` and the plugins' ``src/``. It imports nothing of pdc, so it
runs where pdc is not importable yet (a GPU machine's first call)::

    PYTHONPATH=$(python benchmarks/dist_shim.py DIR)${PYTHONPATH:+:$PYTHONPATH}

``benchmarks/gpu_figures.sh`` uses it, and so do the dry-run tests of the GPU calls
(``--cuda-plugin figures_host_plugin``: pdc-cuda's host build as the ``cuda`` backend,
with ``benchmarks/`` on the path). A folder named on ``PYTHONPATH`` before an installed
pdc wins: ``importlib.metadata`` keeps the first distribution of each name.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Distribution -> (its ``src/`` under the repository root, its entry points with
#: ``{cuda}`` for the module that provides the ``cuda`` backend).
DISTRIBUTIONS = {
    "pdc-core": ("src", "[console_scripts]\npdc = pdc_core._cli:main"),
    "pdc-cpu": ("plugins/pdc_cpu/src", "[pdc]\ncpu = pdc_cpu"),
    "pdc-cuda": ("plugins/pdc_cuda/src", "[pdc]\ncuda = {cuda}"),
}


def version(path: Path) -> str:
    """The ``__version__ = "..."`` of a ``_version.py``."""
    found = re.search(r'^__version__\s*=\s*"([^"]+)"', path.read_text(encoding="utf-8"), re.M)
    if found is None:
        raise ValueError(f'{path} has no __version__ = "..." line')
    return found[1]


def write_shim(directory: Path, cuda_plugin: str = "pdc_cuda", root: Path = ROOT) -> list[str]:
    """Write the ``.dist-info`` folders into ``directory`` (created if missing); return
    the ``PYTHONPATH`` entries, in order: ``directory``, then each distribution's ``src/``."""
    if not cuda_plugin.replace(".", "_").isidentifier():
        raise ValueError(f"--cuda-plugin must be a module name, not {cuda_plugin!r}")
    entries = [str(directory)]
    for name, (source, entry_points) in DISTRIBUTIONS.items():
        package = name.replace("-", "_")
        number = version(root / source / package / "_version.py")
        info = directory / f"{package}-{number}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {number}\n"
        (info / "METADATA").write_text(metadata, encoding="utf-8")
        points = entry_points.format(cuda=cuda_plugin) + "\n"
        (info / "entry_points.txt").write_text(points, encoding="utf-8")
        entries.append(str(root / source))
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="the folder to write the shim into")
    parser.add_argument(
        "--cuda-plugin",
        default="pdc_cuda",
        metavar="MODULE",
        help="the module pdc-cuda's entry point names (default pdc_cuda)",
    )
    args = parser.parse_args(argv)
    try:
        entries = write_shim(args.directory, args.cuda_plugin)
    except (OSError, ValueError) as exc:
        print(f"dist_shim.py: {exc}", file=sys.stderr)
        return 2
    print(os.pathsep.join(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
