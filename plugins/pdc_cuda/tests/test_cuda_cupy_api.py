"""Every ``cupy.…`` name pdc-cuda, its GPU tests and the CUDA benchmark use exists in CuPy.

CuPy imports without a driver, so its API surface can be checked on any machine: a
misspelt or removed attribute (``cupy.cuda.runtime.hostAllocMapped``,
``cupy.cuda.Stream.launch_host_func``, ...) fails here instead of on a GPU. Methods
called on CuPy objects (``stream.begin_capture()``) are checked on their classes.
Skipped where CuPy is not installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

cupy = pytest.importorskip("cupy", reason="CuPy is not installed: pip install -e plugins/pdc_cuda")

ROOT = Path(__file__).resolve().parents[3]
FILES = [
    *sorted((ROOT / "plugins" / "pdc_cuda" / "src" / "pdc_cuda").glob("*.py")),
    ROOT / "plugins" / "pdc_cuda" / "tests" / "test_cuda_gpu.py",
    ROOT / "benchmarks" / "cuda_ring.py",
]

#: Methods and properties called on CuPy objects, by the class that has them.
METHODS = {
    "cuda.Stream": (
        "done", "synchronize", "wait_event", "launch_host_func", "begin_capture",
        "end_capture", "__enter__", "__exit__",
    ),
    "cuda.Event": ("record", "synchronize", "done"),
    "cuda.Graph": ("launch",),
    "ndarray": ("get", "set", "data", "flags", "__cuda_array_interface__", "__dlpack__"),
    "RawModule": ("compile", "get_function"),
    "RawKernel": ("max_threads_per_block", "__call__"),
    "cuda.MemoryPool": ("malloc", "used_bytes", "total_bytes", "get_limit", "free_all_blocks"),
    "cuda.MemoryAsyncPool": ("malloc", "used_bytes", "total_bytes", "get_limit"),
    "cuda.PinnedMemoryPool": ("free_all_blocks",),
    "cuda.runtime.PointerAttributes": ("type", "devicePointer"),
    "cuda.compiler.CompileException": ("get_message",),
    # Called through ``self._runtime`` (pdc_cuda._graphs.CupyGraphOps, pdc_cuda._numa),
    # which the attribute scan above cannot follow.
    "cuda.runtime": (
        "memcpyAsync", "memcpyHostToDevice", "memcpyDeviceToHost", "streamBeginCapture",
        "streamEndCapture", "streamCaptureModeThreadLocal", "graphInstantiate", "graphUpload",
        "graphLaunch", "graphDestroy", "graphExecDestroy", "hostRegister", "hostUnregister",
        "deviceGetPCIBusId", "getDevice", "CUDARuntimeError",
    ),
}  # fmt: skip


def _chain(node: ast.expr) -> tuple[str, list[str]] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, list(reversed(parts))
    return None


def _chains(tree: ast.AST) -> set[str]:
    """``a.b.c`` for every attribute chain rooted at ``cupy``, or at a local alias of a
    CuPy module (``runtime = cupy.cuda.runtime`` makes ``runtime.hostAllocMapped``
    ``cuda.runtime.hostAllocMapped``)."""
    aliases = {"cupy": []}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, found = node.targets[0], _chain(node.value)
            if isinstance(target, ast.Name) and found and found[0] == "cupy":
                aliases[target.id] = found[1]
    chains = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found = _chain(node)
            if found and found[0] in aliases:
                chains.add(".".join(aliases[found[0]] + found[1]))
    return chains


def _resolve(path: str) -> object:
    value: object = cupy
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_the_files_are_there():
    for path in FILES:
        assert path.is_file(), path


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_every_cupy_name_exists(path):
    missing = []
    for chain in sorted(_chains(ast.parse(path.read_text()))):
        try:
            _resolve(chain)
        except AttributeError:
            missing.append(f"cupy.{chain}")
    assert not missing, f"{path.name} uses names CuPy {cupy.__version__} does not have: {missing}"


@pytest.mark.parametrize("owner", sorted(METHODS))
def test_methods_used_on_cupy_objects_exist(owner):
    cls = _resolve(owner)
    missing = [name for name in METHODS[owner] if not hasattr(cls, name)]
    assert not missing, f"cupy.{owner} has no {missing}"


def test_signatures_and_constants_the_backend_relies_on():
    assert "non_blocking=False" in (cupy.cuda.Stream.__init__.__doc__ or "")
    assert "blocking=True" in (cupy.ndarray.get.__doc__ or "")
    assert "disable_timing" in (cupy.cuda.Event.__doc__ or "")
    assert cupy.cuda.Stream.null.ptr == 0  # the legacy default stream (synchronize_stream)
    runtime = cupy.cuda.runtime
    assert (runtime.hostAllocPortable, runtime.hostAllocMapped) == (1, 2)
    assert runtime.memoryTypeHost == 1
    # CUDA's values; the graph capture's choice is explained in pdc_cuda._graphs.
    assert (runtime.streamCaptureModeGlobal, runtime.streamCaptureModeThreadLocal) == (0, 1)
    assert (runtime.memcpyHostToDevice, runtime.memcpyDeviceToHost) == (1, 2)
    assert "streamBeginCapture(intptr_t stream, int mode" in runtime.streamBeginCapture.__doc__
    assert "hostRegister(intptr_t ptr, size_t size, unsigned int flags)" in (
        runtime.hostRegister.__doc__ or ""
    )
