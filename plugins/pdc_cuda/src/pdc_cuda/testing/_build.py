"""Host builds of the rendered ring kernel: g++ -std=c++20 and the CUDA vocabulary header.

:func:`build_ring_kernel` takes the exact text the cuda backend hands NVRTC (what
:func:`pdc_cuda._ring_source.render_ring_kernel` returns), compiles it with NVRTC first
(a source NVRTC rejects is never built for the host: the gate that keeps the header
from widening the language), then with the system C++ compiler, with
``host/pdc_cuda_host.h`` forced in, ``host/`` on the include path (its ``cuda/atomic``
is that header) and ``host/pdc_host_launch.h`` appended (the launcher). Builds are
cached by a hash of everything that goes into them, in :func:`cache_dir`.

:func:`load_instance` gives a loaded copy of a build: ``__shared__`` variables are
function-local statics, so every block that runs at once needs a copy of its own;
copies are reused once their launch has been joined (pooled per build).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .._exceptions import CudaCompileError
from .._kernels import compile_options
from .._nvrtc import compile_to_ptx, find_nvrtc

__all__ = [
    "HEADER_DIR",
    "HostBuild",
    "HostBuildError",
    "HostLaunch",
    "Instance",
    "build_ring_kernel",
    "build_ring_kernels",
    "cache_dir",
    "cache_size",
    "clear_cache",
    "compiler",
    "compiler_missing",
    "load_instance",
]

#: The CUDA vocabulary header, its ``cuda/atomic``, the launcher and the TSan driver.
HEADER_DIR = Path(__file__).resolve().parent / "host"

#: Flags of every host build (``sanitize``: plus ``-fsanitize=thread``).
BASE_FLAGS = (
    "-std=c++20", "-O1", "-g", "-fPIC", "-shared", "-pthread", "-fno-strict-aliasing",
    "-fvisibility=hidden",
)  # fmt: skip
TSAN_FLAGS = ("-fsanitize=thread", "-Wno-tsan")


class HostBuildError(RuntimeError):
    """The C++ compiler refused a source NVRTC accepted (a gap in the host header), or
    NVRTC is not there to check the source first."""


@functools.cache
def compiler() -> tuple[str, str] | None:
    """``(path, version)`` of the C++20 compiler (``$PDC_CUDA_HOST_CXX`` or ``g++``,
    version 10 or newer), or ``None``."""
    name = os.environ.get("PDC_CUDA_HOST_CXX", "g++")
    path = shutil.which(name)
    if path is None:
        return None
    try:
        version = subprocess.run(
            [path, "-dumpfullversion"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        major = int(version.split(".")[0])
    except ValueError:
        return None
    return (path, version) if major >= 10 else None


def compiler_missing() -> str | None:
    """Why no host build can be made here, or ``None`` when it can."""
    name = os.environ.get("PDC_CUDA_HOST_CXX", "g++")
    if compiler() is None:
        return (
            f"no C++20 compiler: {name!r} (g++ 10 or newer; $PDC_CUDA_HOST_CXX) is not on PATH "
            "or too old"
        )
    return None


def cache_dir() -> Path:
    """Where builds are kept: ``$PDC_CUDA_HOST_CACHE``, else ``~/.cache/pdc-cuda-host``."""
    configured = os.environ.get("PDC_CUDA_HOST_CACHE")
    path = Path(configured) if configured else Path.home() / ".cache" / "pdc-cuda-host"
    path.mkdir(parents=True, exist_ok=True)
    return path


#: What the host build keeps in :func:`cache_dir` (``build-*`` are builds in progress,
#: removed by the process making them, so never cleared from outside).
CACHED_PREFIXES = ("nvrtc-", "pch-", "ring-", "tsan-driver-")


def _cached_entries() -> list[Path]:
    return [path for path in cache_dir().iterdir() if path.name.startswith(CACHED_PREFIXES)]


def _size(path: Path) -> int:
    try:
        if path.is_dir() and not path.is_symlink():
            return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())
        return path.stat().st_size
    except FileNotFoundError:  # removed meanwhile (a clear or a build elsewhere)
        return 0


def cache_size() -> int:
    """Bytes the host build keeps in :func:`cache_dir` (its builds, precompiled headers
    and NVRTC verdicts); every distinct kernel source adds a build."""
    return sum(_size(path) for path in _cached_entries())


def clear_cache() -> int:
    """Remove what the host build keeps in :func:`cache_dir`; returns the bytes freed.

    Only the host build's own entries go (the directory may be one you chose with
    ``$PDC_CUDA_HOST_CACHE``); the next run rebuilds what it needs. From a shell:
    ``python -m pdc_cuda.testing --clear-cache``. Builds already loaded by a running
    process stay valid (their files are unlinked, not overwritten).
    """
    freed = 0
    for path in _cached_entries():
        size = _size(path)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:  # another process cleared it first
            continue
        freed += size
    return freed


@dataclass(frozen=True)
class HostBuild:
    """One host build: the shared object ``path`` of ``source`` (``sanitize``: TSan)."""

    path: Path
    key: str
    source: str = field(repr=False)
    sanitize: bool = False


def _header_text() -> str:
    return "".join(
        (HEADER_DIR / name).read_text(encoding="utf-8")
        for name in ("pdc_cuda_host.h", "cuda/atomic", "pdc_host_launch.h")
    )


def _nvrtc_gate(source: str, options: tuple[str, ...]) -> None:
    """Compile ``source`` with NVRTC as the cuda backend would (cached by hash): a source
    NVRTC rejects raises :class:`~pdc_cuda.CudaCompileError` here, before any host build."""
    full = compile_options(options)
    digest = hashlib.sha256(repr((source, full)).encode()).hexdigest()[:32]
    marker = cache_dir() / f"nvrtc-{digest}.ok"
    if marker.exists():
        return
    try:
        # NVRTC's automatic precompiled header (12.4+) reuses the parse of <cuda/atomic>
        # across gates (about 0.4 s a source instead of 1 s); it accepts and rejects
        # exactly what the same options without it do (only the order of globals in the
        # PTX differs); a source it rejects is compiled again without it, whose verdict
        # stands, so an error is the cuda backend's, word for word.
        compile_to_ptx(
            source, options=(*full, *_pch_option()), filename="pdc_ring_kernel.cu",
            what="the resident ring kernel",
        )  # fmt: skip
    except CudaCompileError:
        compile_to_ptx(
            source, options=full, filename="pdc_ring_kernel.cu", what="the resident ring kernel"
        )
    marker.touch()


@functools.cache
def _nvrtc_has_pch() -> bool:
    return find_nvrtc().version >= (12, 4)


def _pch_option() -> tuple[str, ...]:
    """``-pch`` where NVRTC has it (12.4 and newer), else nothing; with ``-pch-dir`` in
    the cache, since NVRTC otherwise writes its header image (tens of MB, named after the
    source file) into the current working directory."""
    if not _nvrtc_has_pch():
        return ()
    directory = cache_dir() / "nvrtc-pch"
    directory.mkdir(exist_ok=True)
    return ("-pch", f"-pch-dir={directory}")


_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()


@contextlib.contextmanager
def _held_across_processes(path: Path) -> Iterator[None]:
    """``path`` locked (``flock``) while the block runs: a concurrent process building
    the same key (two test runs, pytest-xdist workers) waits and then finds the build,
    instead of compiling it a second time. Where there is no ``flock``, both build and
    agree (the output is replaced atomically)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    # O_NOFOLLOW: a link planted at the lock's name is refused, never followed.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # released when the descriptor closes
        yield
    finally:
        os.close(descriptor)


def build_ring_kernel(
    source: str, *, options: Sequence[str] = (), sanitize: bool = False
) -> HostBuild:
    """The host build of a rendered ring kernel; compiled once per distinct input.

    ``options`` are the NVRTC options the cuda backend would use (``-std=c++17`` is
    added as it adds it). Raises :class:`~pdc_cuda.CudaCompileError` (NVRTC rejects the
    source: as a GPU launch would), :class:`~pdc_cuda.NvrtcUnavailable` (no NVRTC to
    check it with) and :class:`HostBuildError` (no compiler, or it refused the source).
    """
    found = compiler()
    if found is None:
        raise HostBuildError(compiler_missing() or "no C++ compiler")
    _nvrtc_gate(source, tuple(options))
    path, version = found
    flags = (*BASE_FLAGS, *(TSAN_FLAGS if sanitize else ()))
    key = hashlib.sha256(repr((source, _header_text(), path, version, flags)).encode()).hexdigest()[
        :32
    ]
    directory = cache_dir()
    output = directory / f"ring-{key}.so"
    with _build_locks_guard:
        lock = _build_locks.setdefault(key, threading.Lock())
    with lock, _held_across_processes(directory / f"ring-{key}.lock"):
        if not output.exists():
            with tempfile.TemporaryDirectory(dir=directory, prefix="build-") as work:
                kernel = Path(work) / "pdc_ring_kernel.cu"
                kernel.write_text(source, encoding="utf-8")
                unit = Path(work) / "host_launch.cpp"
                unit.write_text(
                    '#include "pdc_ring_kernel.cu"\n#include "pdc_host_launch.h"\n',
                    encoding="utf-8",
                )
                built = Path(work) / "out.so"
                command = [
                    path,
                    *flags,
                    "-x",
                    "c++",
                    "-I",
                    str(HEADER_DIR),
                    "-include",
                    str(_precompiled_header(path, version, flags)),
                    str(unit),
                    "-o",
                    str(built),
                ]
                result = subprocess.run(command, capture_output=True, text=True, timeout=300)
                if result.returncode != 0:
                    raise HostBuildError(
                        "the host build of a ring kernel NVRTC accepts failed (the CUDA "
                        "vocabulary header lacks something it uses):\n" + result.stderr[-6000:]
                    )
                os.replace(built, output)  # atomic: concurrent builders agree
    return HostBuild(output, key, source, sanitize)


_pch_lock = threading.Lock()


def _precompiled_header(path: str, version: str, flags: tuple[str, ...]) -> Path:
    """What a host build forces in: ``host/pdc_cuda_host.h``, precompiled.

    A header in the cache that includes the real one, with its ``.gch`` beside it (built
    once per compiler, flags and header text): g++ then loads the parsed header instead
    of parsing the standard headers it includes again (about 0.5 s of each build's 1.5).
    The meaning is the header's: g++ uses a ``.gch`` only when it was built with the
    same flags, and parses the header itself otherwise. ``#pragma once`` still sees the
    real file, which the kernel's ``<cuda/atomic>`` includes again.
    """
    real = HEADER_DIR / "pdc_cuda_host.h"
    key = hashlib.sha256(repr((_header_text(), path, version, flags)).encode()).hexdigest()[:32]
    directory = cache_dir() / f"pch-{key}"
    header = directory / "pdc_host_pch.h"
    with _pch_lock, _held_across_processes(cache_dir() / f"pch-{key}.lock"):
        if (directory / "pdc_host_pch.h.gch").exists():
            return header
        work = Path(tempfile.mkdtemp(dir=cache_dir(), prefix="build-pch-"))
        try:
            wrapper = work / "pdc_host_pch.h"
            wrapper.write_text(f'#include "{real}"\n', encoding="utf-8")
            command = [
                path, *flags, "-x", "c++-header", "-I", str(HEADER_DIR), str(wrapper),
                "-o", str(work / "pdc_host_pch.h.gch"),
            ]  # fmt: skip
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                raise HostBuildError("the CUDA vocabulary header does not build:\n" + result.stderr)
            try:
                os.rename(work, directory)  # atomic: a concurrent process's is as good
            except OSError:
                if not (directory / "pdc_host_pch.h.gch").exists():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return header


def build_ring_kernels(
    sources: Iterable[str], *, sanitize: bool = False, workers: int | None = None
) -> list[HostBuild]:
    """:func:`build_ring_kernel` of each source, distinct ones compiled in parallel
    (``workers``: the CPU count by default)."""
    sources = list(sources)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda text: build_ring_kernel(text, sanitize=sanitize), sources))


class Instance:
    """A loaded copy of a build: its own ``__shared__`` and ``__device__`` variables."""

    def __init__(self, build: HostBuild, path: Path) -> None:
        self.build = build
        self.path = path
        lib = ctypes.CDLL(str(path))
        lib.pdc_host_launch.restype = ctypes.c_void_p
        lib.pdc_host_launch.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_uint,
            ctypes.POINTER(ctypes.c_ulonglong),
            ctypes.c_uint,
        ]
        lib.pdc_host_status.restype = ctypes.c_int
        lib.pdc_host_status.argtypes = [ctypes.c_void_p]
        lib.pdc_host_failure.restype = ctypes.c_long
        lib.pdc_host_failure.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_long]
        lib.pdc_host_abort.restype = None
        lib.pdc_host_abort.argtypes = [ctypes.c_void_p]
        lib.pdc_host_join.restype = None
        lib.pdc_host_join.argtypes = [ctypes.c_void_p]
        lib.pdc_host_free.restype = None
        lib.pdc_host_free.argtypes = [ctypes.c_void_p]
        self.lib = lib

    def launch(
        self, in_region: int, out_region: int, state: int, threads: int,
        regions: Sequence[tuple[int, int, int]],
    ) -> HostLaunch:  # fmt: skip
        """Start one block of ``threads`` threads; returns at once."""
        flat = (ctypes.c_ulonglong * (3 * len(regions) or 1))(
            *[value for region in regions for value in region]
        )
        handle = self.lib.pdc_host_launch(
            in_region, out_region, state or None, threads, flat, len(regions)
        )
        return HostLaunch(self, int(handle))


class HostLaunch:
    """One running block of a host build (what a host stream waits for)."""

    def __init__(self, instance: Instance, handle: int) -> None:
        self.instance = instance
        self._handle: int | None = handle
        self._status = 0
        self._failure = ""
        self._lock = threading.Lock()

    @property
    def status(self) -> int:
        """0 running, 1 finished, 2 failed (never blocks)."""
        with self._lock:
            if self._handle is not None and self._status == 0:
                self._status = int(self.instance.lib.pdc_host_status(self._handle))
                if self._status == 2:
                    self._failure = self._read_failure(self._handle)
            return self._status

    @property
    def failure(self) -> str:
        self.status  # noqa: B018 - refreshes it
        return self._failure

    def _read_failure(self, handle: int) -> str:
        buffer = ctypes.create_string_buffer(4096)
        self.instance.lib.pdc_host_failure(handle, buffer, len(buffer))
        return buffer.value.decode("utf-8", "replace")

    def join(self, abort: bool = False) -> None:
        """Wait for every thread (``abort``: make them unwind first), free the launch
        and give the instance back to its pool. Idempotent."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is None:
                return
            lib = self.instance.lib
            if abort and lib.pdc_host_status(handle) == 0:
                lib.pdc_host_abort(handle)
            lib.pdc_host_join(handle)  # ctypes releases the GIL while it waits
            if self._status == 0:
                self._status = int(lib.pdc_host_status(handle))  # final once joined
                if self._status == 2:
                    self._failure = self._read_failure(handle)
            lib.pdc_host_free(handle)
        _release_instance(self.instance)


_pool_lock = threading.Lock()
_free: dict[str, list[Instance]] = {}
_count: dict[str, int] = {}


def load_instance(build: HostBuild) -> Instance:
    """A loaded copy of ``build`` no running launch uses (a free one, or a new copy)."""
    with _pool_lock:
        free = _free.setdefault(build.key, [])
        if free:
            return free.pop()
        number = _count.get(build.key, 0)
        _count[build.key] = number + 1
    path = _instance_dir() / f"{build.path.stem}.{number}.so"
    shutil.copyfile(build.path, path)
    return Instance(build, path)


def _release_instance(instance: Instance) -> None:
    with _pool_lock:
        _free.setdefault(instance.build.key, []).append(instance)


@functools.cache
def _instance_dir() -> Path:
    """This process's directory of loaded copies (removed at exit)."""
    path = Path(tempfile.mkdtemp(prefix="pdc-cuda-host-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
