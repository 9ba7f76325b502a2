"""Compiling CUDA C to PTX with NVRTC alone: no driver, no GPU.

NVRTC is a plain library (``libnvrtc.so``); unlike ``cupy.RawModule`` (which asks the
current device for its architecture) it needs no driver, so CI machines without a GPU
can prove that pdc's kernel templates and a user's device functions compile. Two
Python bindings are tried, in order:

1. CuPy's own (``cupy_backends.cuda.libs.nvrtc``), the one ``RawModule`` uses;
2. NVIDIA's ``cuda-bindings`` (``cuda.bindings.nvrtc``).

Both need the NVRTC library itself (the ``nvidia-cuda-nvrtc-cu12`` wheel, i.e.
``pip install 'pdc-cuda[nvrtc]'``, or a CUDA 12 toolkit; with CUDA 13 the
``cuda-toolkit[nvrtc]==13.*`` wheels or a CUDA 13 toolkit). ``<cuda/atomic>`` comes from
CCCL: the copy bundled inside the CuPy wheel, else the ``nvidia-cuda-cccl-cu12`` wheel,
else the toolkit at ``CUDA_PATH`` (``include/``, or CUDA 13's ``include/cccl/``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._exceptions import CudaCompileError, NvrtcUnavailable

__all__ = [
    "NvrtcCompiler",
    "cccl_include_options",
    "compile_to_cubin",
    "compile_to_ptx",
    "find_nvrtc",
]

#: The architecture PTX is generated for when none is given (Hopper, H100/H200).
DEFAULT_ARCH = "compute_90"


def min_compute_capability(nvrtc_version: tuple[int, int]) -> tuple[int, int]:
    """The oldest compute capability a resident ring kernel compiled by this NVRTC runs on.

    The kernel needs 7.0 (``__nanosleep``, system-scope acquire/release); CUDA 13's
    NVRTC no longer accepts ``compute_70``/``compute_72``, so with it the floor is 7.5.
    """
    return (7, 5) if nvrtc_version[0] >= 13 else (7, 0)


def _cupy_cccl() -> list[str]:
    spec = importlib.util.find_spec("cupy")
    if spec is None or not spec.submodule_search_locations:
        return []
    for location in spec.submodule_search_locations:
        include = Path(location) / "_core" / "include"
        cccl = include / "cupy" / "_cccl"
        if (cccl / "libcudacxx" / "cuda" / "atomic").is_file():
            return [
                str(cccl / "libcudacxx"),
                str(cccl / "cub"),
                str(cccl / "thrust"),
                str(include),
            ]
    return []


def _wheel_cccl() -> list[str]:
    try:
        spec = importlib.util.find_spec("nvidia.cuda_cccl")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    for location in spec.submodule_search_locations:
        include = Path(location) / "include"
        if (include / "cuda" / "atomic").is_file():
            return [str(include)]
    return []


def _toolkit_cccl() -> list[str]:
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if not root:
            continue
        # CUDA 12 keeps CCCL in include/; CUDA 13 moved it to include/cccl/.
        for include in (Path(root) / "include", Path(root) / "include" / "cccl"):
            if (include / "cuda" / "atomic").is_file():
                return [str(include)]
    return []


def cccl_include_options() -> tuple[str, ...]:
    """``-I`` options that make ``#include <cuda/atomic>`` work (empty if none found)."""
    for finder in (_cupy_cccl, _wheel_cccl, _toolkit_cccl):
        dirs = finder()
        if dirs:
            return tuple(f"-I{directory}" for directory in dirs)
    return ()


@dataclass(frozen=True)
class NvrtcCompiler:
    """One usable NVRTC binding: ``compile(source, name, options) -> (ok, ptx, log)``,
    and ``compile_cubin`` the same with the cubin (for ``-arch=sm_XY``) as bytes."""

    binding: str
    version: tuple[int, int]
    compile: Callable[[str, str, Sequence[str]], tuple[bool, str, str]]
    compile_cubin: Callable[[str, str, Sequence[str]], tuple[bool, bytes, str]]


def _cupy_binding() -> NvrtcCompiler:
    nvrtc = importlib.import_module("cupy_backends.cuda.libs.nvrtc")
    version = tuple(nvrtc.getVersion())  # loads libnvrtc; raises if it is missing

    def build(source: str, name: str, options: Sequence[str], get: Any) -> tuple[bool, Any, str]:
        program = nvrtc.createProgram(source, name, (), ())
        try:
            try:
                nvrtc.compileProgram(program, tuple(options))
            except nvrtc.NVRTCError:
                return False, None, _text(nvrtc.getProgramLog(program))
            return True, get(program), _text(nvrtc.getProgramLog(program))
        finally:
            nvrtc.destroyProgram(program)

    def compile_source(source: str, name: str, options: Sequence[str]) -> tuple[bool, str, str]:
        ok, ptx, log = build(source, name, options, nvrtc.getPTX)
        return ok, _text(ptx) if ok else "", log

    def compile_cubin(source: str, name: str, options: Sequence[str]) -> tuple[bool, bytes, str]:
        ok, cubin, log = build(source, name, options, nvrtc.getCUBIN)
        return ok, bytes(cubin) if ok else b"", log

    return NvrtcCompiler(
        "cupy_backends.cuda.libs.nvrtc", (version[0], version[1]), compile_source, compile_cubin
    )


def _cuda_bindings_binding() -> NvrtcCompiler:
    nvrtc = importlib.import_module("cuda.bindings.nvrtc")
    success = nvrtc.nvrtcResult.NVRTC_SUCCESS

    def check(result: tuple[object, ...]) -> tuple[object, ...]:
        if result[0] != success:
            raise NvrtcUnavailable(f"NVRTC call failed: {result[0]}")
        return result[1:]

    major, minor = check(nvrtc.nvrtcVersion())

    def build(
        source: str, name: str, options: Sequence[str], size: Any, get: Any
    ) -> tuple[bool, bytes, str]:
        (program,) = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
        try:
            encoded = [option.encode() for option in options]
            (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
            (log_size,) = check(nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * int(str(log_size))
            check(nvrtc.nvrtcGetProgramLog(program, log))
            if status != success:
                return False, b"", _text(log)
            (image_size,) = check(size(program))
            image = b" " * int(str(image_size))
            check(get(program, image))
            return True, image, _text(log)
        finally:
            nvrtc.nvrtcDestroyProgram(program)

    def compile_source(source: str, name: str, options: Sequence[str]) -> tuple[bool, str, str]:
        ok, ptx, log = build(source, name, options, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
        return ok, _text(ptx) if ok else "", log

    def compile_cubin(source: str, name: str, options: Sequence[str]) -> tuple[bool, bytes, str]:
        return build(source, name, options, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)

    return NvrtcCompiler(
        "cuda.bindings.nvrtc", (int(str(major)), int(str(minor))), compile_source, compile_cubin
    )


def _text(raw: object) -> str:
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).rstrip(b"\0").decode("utf-8", errors="replace")
    return str(raw)


#: NVRTC for CUDA 13, where pdc-cuda is installed without its CUDA 12 dependencies
#: (docs/cuda-backend.md, "Installing"): NVIDIA's wheel, as ``cupy-cuda13x[ctk]`` has it.
CUDA13_INSTALL_HINT = "pip install 'cuda-toolkit[nvrtc]==13.*'"

_compiler: NvrtcCompiler | None = None
_failures: list[str] = []


def find_nvrtc() -> NvrtcCompiler:
    """The first NVRTC binding that loads; raises :class:`NvrtcUnavailable` naming why not."""
    global _compiler
    if _compiler is not None:
        return _compiler
    failures = []
    for label, factory in (
        ("CuPy's NVRTC binding", _cupy_binding),
        ("cuda-bindings", _cuda_bindings_binding),
    ):
        try:
            _compiler = factory()
        except Exception as exc:
            failures.append(f"{label}: {type(exc).__name__}: {exc}".strip())
            continue
        return _compiler
    raise NvrtcUnavailable(
        "NVRTC is not usable here (install it with: pip install 'pdc-cuda[nvrtc]', or with "
        f"CUDA 13 {CUDA13_INSTALL_HINT}); " + "; ".join(failures)
    )


def compile_to_ptx(
    source: str,
    *,
    options: Sequence[str] = ("-std=c++17",),
    arch: str = DEFAULT_ARCH,
    filename: str = "pdc_kernel.cu",
    what: str = "",
) -> str:
    """Compile ``source`` to PTX for ``arch`` (``compute_90`` by default); no GPU needed.

    CCCL's include directories are added, so ``<cuda/atomic>`` resolves. Raises
    :class:`CudaCompileError` with NVRTC's log when the source does not compile and
    :class:`NvrtcUnavailable` when no NVRTC is installed.
    """
    compiler = find_nvrtc()
    arch_option = arch if arch.startswith("-") else f"-arch={arch}"
    full = (arch_option, *options, *cccl_include_options())
    ok, ptx, log = compiler.compile(source, filename, full)
    if not ok:
        raise CudaCompileError(filename, log, source, full, what=what or filename)
    return ptx


def compile_to_cubin(
    source: str,
    *,
    options: Sequence[str] = ("-std=c++17",),
    arch: str = "sm_90",
    filename: str = "pdc_kernel.cu",
    what: str = "",
) -> bytes:
    """Compile ``source`` to a cubin for ``arch`` (``sm_XY``): machine code the driver
    loads as it is, whatever PTX version it accepts (a cubin from a newer NVRTC than the
    driver still loads; its PTX may not). Errors as :func:`compile_to_ptx`."""
    compiler = find_nvrtc()
    full = (f"-arch={arch}", *options, *cccl_include_options())
    ok, cubin, log = compiler.compile_cubin(source, filename, full)
    if not ok:
        raise CudaCompileError(filename, log, source, full, what=what or filename)
    return cubin
