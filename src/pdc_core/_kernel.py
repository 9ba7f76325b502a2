"""``@kernel``: functions launched over a grid of threads, on whichever backend runs them.

A kernel has a body — a Python function in numba.cuda style (``i = cuda.grid(1)``) or
CUDA C source (:meth:`kernel.source <_KernelDecorator.source>`) — and an optional
launch configuration. Calling it launches it::

    @kernel(block=(256,))
    def scale(data, out):
        i = cuda.grid(1)
        if i < len(data):
            out[i] = data[i] * 2

    scale(data, out)              # grid covers len(data), block 256, waits for completion
    scale[grid, block](data, out) # numba's explicit form
    await scale.launch_async(data, out)

The launch configuration comes from :func:`launch_config`: without a block, the
seeds' table picks one from the problem size; the grid always covers the problem
(``ceil(size / block)`` per dimension). The problem size is ``size=`` when given,
else the shape of the first array argument (its leading dimensions: as many as the
block has, or up to three).

Where it runs: the ``backend=`` of the launch, else of the decorator, else the backend
of the stream or of the :class:`~pdc_core.UnifiedBuffer` arguments (they must agree),
else the default backend. Python bodies need :attr:`Capability.PYTHON_KERNELS`
(``cpu``: simulated, see :mod:`pdc_core.cuda`; ``cuda``: numba-cuda; ``metal``: MLX
operations), source needs :attr:`Capability.KERNELS` (``cuda``).
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
import sys
import threading
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, overload

import numpy as np

from ._backend._contract import Backend, Capability, Stream, wait_shielded_on_cancel
from ._buffer import UnifiedBuffer
from ._exceptions import CapabilityError
from ._launch import (
    DEFAULT_MAX_THREADS_PER_BLOCK,
    Dims,
    LaunchConfig,
    auto_block,
    check_block,
    check_grid,
    dims,
    launch_config,
    problem_size,
)
from ._plugins import available_backends, resolve_backend

__all__ = ["ConfiguredKernel", "Kernel", "kernel"]

# --------------------------------------------------------------------------------------
# arguments


def _is_array(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return True
    if isinstance(value, type | np.generic) or not isinstance(getattr(value, "shape", None), tuple):
        return False
    return any(
        hasattr(value, attribute)
        for attribute in ("__cuda_array_interface__", "__dlpack__", "__array_interface__")
    )


_SCALARS = (bool, int, float, complex, np.generic)


#: What kernels take, said by every message about a wrong argument.
_TAKES = "kernels take arrays (NumPy, CuPy, MLX or UnifiedBuffer) and scalars"
#: Python containers that are never kernel arguments (a list is not an array).
_CONTAINERS = (list, dict, set, frozenset, str, bytes, bytearray)

#: CUDA's dynamic shared memory per block without an opt-in (48 KiB), for a device
#: that does not report ``sharedMemPerBlock``.
_DEFAULT_SHARED_MEM_PER_BLOCK: Final = 48 * 1024

_DEVICE_LIMITS: dict[tuple[str, str], tuple[int, bool]] = {}


def _device_limit(backend: Backend, key: str, default: int) -> tuple[int, bool]:
    """The device property ``key`` (a positive int) and True, else ``default`` and False.

    Cached per device: a backend's device properties do not change while it runs.
    """
    cache_key = (backend.qualified_name, key)
    cached = _DEVICE_LIMITS.get(cache_key)
    if cached is None:
        try:
            value = backend.device_info.properties.get(key)
        except Exception:  # a backend without device properties keeps CUDA's limit
            value = None
        if isinstance(value, int | np.integer) and not isinstance(value, bool) and value > 0:
            cached = (int(value), True)
        else:
            cached = (default, False)
        _DEVICE_LIMITS[cache_key] = cached
    return cached


def _max_threads(backend: Backend) -> int:
    return _device_limit(backend, "maxThreadsPerBlock", DEFAULT_MAX_THREADS_PER_BLOCK)[0]


def _check_shared_mem(shared_mem: Any, backend: Backend) -> int:
    """``shared_mem`` as an int, or an error naming the value and the device's limit."""
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int | np.integer):
        raise TypeError(f"shared_mem must be a number of bytes, not {shared_mem!r}")
    if shared_mem < 0:
        raise ValueError(f"shared_mem must not be negative, got {shared_mem}")
    limit, reported = _device_limit(backend, "sharedMemPerBlock", _DEFAULT_SHARED_MEM_PER_BLOCK)
    if shared_mem > limit:
        source = (
            "its sharedMemPerBlock"
            if reported
            else "CUDA's default per block; the device reports no sharedMemPerBlock"
        )
        raise ValueError(
            f"shared_mem={int(shared_mem)} bytes is more than {backend.qualified_name} allows: "
            f"the limit is {limit} bytes of dynamic shared memory per block ({source})"
        )
    return int(shared_mem)


# --------------------------------------------------------------------------------------
# the CPU simulator's speed

#: Backends whose ``run_python_kernel`` simulates every thread on the CPU.
_SIMULATING_BACKENDS: Final = frozenset({"cpu"})
#: A launch of more threads than this on a simulating backend warns before it runs:
#: at 10^6-10^7 simple threads per second, 10^9 threads take minutes.
_SIMULATOR_WARN_THREADS: Final = 10**9


class _SlowSimulationWarning(UserWarning):
    """A launch so large that the CPU simulator will take minutes or more to run it."""


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this module, for ``warnings.warn``
    called by the caller of this function."""
    level = 1
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
        level += 1
    return level


# --------------------------------------------------------------------------------------
# kernels

_GLOBAL_FUNCTION = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*\Z")
_CPU_MODES: Final = ("auto", "lanes", "threads")


class Kernel:
    """A kernel: a body plus an optional launch configuration. Made by :data:`kernel`.

    Calling it (``k(*args, grid=, block=, size=, stream=, backend=, shared_mem=)``)
    launches it over the grid and, without a ``stream``, returns once it has
    completed; with a stream it returns once the launch is queued (synchronize the
    stream before reading results). Arguments are positional; keywords are launch
    options. ``k[grid, block]`` (and ``k[grid, block, stream, shared_mem]``) gives
    numba's launch form. :meth:`launch_async` waits without blocking the event loop.

    Arguments may be NumPy arrays (written in place; on a backend with separate device
    memory they are copied to the device and back, around the launch),
    :class:`~pdc_core.UnifiedBuffer` (its ``.device`` view: state tracking stays
    right), the backend's own device arrays, scalars, enum members, and tuples of these
    (nested, empty or named, as numba takes them); a Python container (a list, a str,
    ...) is refused with a ``TypeError`` naming its position.

    ``shared_mem`` (bytes of dynamic shared memory per block) may not exceed the
    device's ``sharedMemPerBlock`` (CUDA's 48 KiB where the device does not report
    one): ``ValueError`` naming the limit. On the cpu backend, whose simulator runs
    roughly 10^6-10^7 simple threads per second, a launch of more than 10^9 threads
    warns (a ``UserWarning``) before it runs.
    """

    def __init__(
        self,
        body: Callable[..., Any] | None = None,
        *,
        source: str | None = None,
        name: str | None = None,
        block: Dims | None = None,
        grid: Dims | None = None,
        backend: Backend | str | None = None,
        options: Mapping[str, Any] | Sequence[str] | None = None,
    ) -> None:
        if (body is None) == (source is None):
            raise TypeError("a Kernel needs exactly one of a Python body and a source")
        self._lock = threading.Lock()
        self._compiled: dict[str, Any] = {}
        self._signature: inspect.Signature | None = None
        self._body: types.FunctionType | None = None
        self._source: str | None = None
        self._python_options: Mapping[str, Any] = {}
        self._compile_options: tuple[str, ...] = ()
        if body is not None:
            if isinstance(body, Kernel):
                raise TypeError(f"{body!r} is already a kernel")
            body = _numba_python_function(body)
            if not isinstance(body, types.FunctionType):
                raise TypeError(f"a kernel body must be a Python function, not {body!r}")
            if inspect.iscoroutinefunction(body) or inspect.isasyncgenfunction(body):
                raise TypeError(
                    f"kernel body {body.__qualname__} is an async function; a kernel body is "
                    "a plain def run by every thread"
                )
            if inspect.isgeneratorfunction(body):
                raise TypeError(f"kernel body {body.__qualname__} is a generator function")
            self._body = body
            self._signature = inspect.signature(body)
            if options is not None and not isinstance(options, Mapping):
                raise TypeError(
                    "options of a Python kernel are a mapping handed to the backend "
                    f"(such as {{'cpu_mode': 'threads'}} or {{'fastmath': True}}), not {options!r}"
                )
            self._python_options = dict(options or {})
            mode = self._python_options.get("cpu_mode", "auto")
            if mode not in _CPU_MODES:
                raise ValueError(f"cpu_mode must be one of {', '.join(_CPU_MODES)}, not {mode!r}")
            self.name = name if name is not None else body.__name__
            functools.update_wrapper(self, body)
        else:
            assert source is not None
            if not isinstance(source, str) or not source.strip():
                raise TypeError(f"kernel source must be a non-empty string, not {source!r}")
            if options is None:
                options = ()
            if isinstance(options, str | bytes | Mapping) or not all(
                isinstance(option, str) for option in options
            ):
                raise TypeError(
                    f"options of a source kernel are compiler flags (a tuple of str), not "
                    f"{options!r}"
                )
            self._source = source
            self._compile_options = tuple(options)
            self.name = self._entry_point(source, name)
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"a kernel name must be a non-empty string, not {self.name!r}")
        self.block: tuple[int, ...] | None = None
        if block is not None:
            self.block = dims(block, "block")
            check_block(self.block, DEFAULT_MAX_THREADS_PER_BLOCK)
        self.grid: tuple[int, ...] | None = None
        if grid is not None:
            self.grid = dims(grid, "grid")
            if self.block is not None:
                check_grid(self.grid, self.block)
        if backend is not None and not isinstance(backend, Backend | str):
            raise TypeError(
                f"backend must be a name such as 'cuda:1' or a Backend, not {backend!r}"
            )
        self.backend = backend

    @staticmethod
    def _entry_point(source: str, name: str | None) -> str:
        found = _GLOBAL_FUNCTION.findall(source)
        if name is None:
            if len(found) != 1:
                listing = ", ".join(found) or "none"
                raise ValueError(
                    f"give name= to say which __global__ function of the source to launch "
                    f"(found: {listing})"
                )
            return str(found[0])
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise ValueError(f"kernel name {name!r} is not a C identifier")
        return name

    # -- description ---------------------------------------------------------------------

    @property
    def py_func(self) -> types.FunctionType | None:
        """The Python body (None for a source kernel), as numba's dispatchers call it."""
        return self._body

    @property
    def source(self) -> str | None:
        """The CUDA C source (None for a Python kernel)."""
        return self._source

    @property
    def options(self) -> Mapping[str, Any] | tuple[str, ...]:
        """Backend options (Python kernel) or compiler flags (source kernel)."""
        return self._python_options if self._body is not None else self._compile_options

    def __repr__(self) -> str:
        kind = "python" if self._body is not None else "source"
        block = f" block={self.block}" if self.block is not None else ""
        grid = f" grid={self.grid}" if self.grid is not None else ""
        return f"<Kernel {self.name!r} ({kind}){block}{grid}>"

    # -- launching -----------------------------------------------------------------------

    def __call__(
        self,
        *args: Any,
        grid: Dims | None = None,
        block: Dims | None = None,
        size: Any = None,
        stream: Stream | None = None,
        backend: Backend | str | None = None,
        shared_mem: int = 0,
    ) -> None:
        """Launch over the grid; see the class documentation."""
        self._launch(args, grid, block, size, stream, backend, shared_mem)

    launch = __call__

    def __getitem__(self, config: Any) -> ConfiguredKernel:
        """numba's form: ``k[grid, block]``, ``k[grid, block, stream]``,
        ``k[grid, block, stream, shared_mem]`` (a stream of 0 is no stream)."""
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise TypeError(
                "launch with kernel[grid, block], kernel[grid, block, stream] or "
                f"kernel[grid, block, stream, shared_mem], not kernel[{config!r}]"
            )
        grid, block, *rest = config
        stream = rest[0] if rest else None
        if isinstance(stream, int) and not isinstance(stream, bool) and stream == 0:
            stream = None
        shared_mem = rest[1] if len(rest) > 1 else 0
        return ConfiguredKernel(self, dims(grid, "grid"), dims(block, "block"), stream, shared_mem)

    def forall(
        self, ntasks: int, tpb: int = 0, stream: Stream | int | None = None, sharedmem: int = 0
    ) -> Callable[..., None]:
        """numba's ``kernel.forall(ntasks)``: a launcher covering ``ntasks`` threads in 1-D.

        ``tpb`` (threads per block) 0 picks a block from the size as a launch without
        ``block=`` does; ``forall(0)`` launches nothing; a negative count is a
        ``ValueError``. Call the result with the kernel's arguments.
        """
        if isinstance(ntasks, bool) or not isinstance(ntasks, int | np.integer):
            raise TypeError(f"forall takes a number of tasks (an int), not {ntasks!r}")
        if ntasks < 0:
            raise ValueError(f"Can't create ForAll with negative task count: {ntasks}")
        if isinstance(tpb, bool) or not isinstance(tpb, int | np.integer) or tpb < 0:
            raise TypeError(f"forall's tpb must be a number of threads per block, not {tpb!r}")
        if isinstance(stream, int) and not isinstance(stream, bool) and stream == 0:
            stream = None  # numba's "no stream"
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(
                f"stream must be a pdc Stream (backend.create_stream()) or 0, not {stream!r}"
            )
        return functools.partial(
            self,
            size=int(ntasks),
            block=int(tpb) or None,
            stream=stream,
            shared_mem=sharedmem,
        )

    def __getattr__(self, name: str) -> Any:
        if name in _NUMBA_DISPATCHER_ONLY:
            raise AttributeError(
                f"pdc's Kernel has no {name!r}: numba's dispatcher methods other than "
                "forall (specialisation, inspection, per-signature overloads, "
                "extensions) belong to numba's compiler, which pdc uses only on the cuda "
                "backend; a pdc kernel is launched with k[grid, block](...) or k(...)"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    async def launch_async(
        self,
        *args: Any,
        grid: Dims | None = None,
        block: Dims | None = None,
        size: Any = None,
        stream: Stream | None = None,
        backend: Backend | str | None = None,
        shared_mem: int = 0,
    ) -> None:
        """Launch, then wait for completion without blocking the event loop.

        Without a ``stream`` the launch runs on a new stream of the backend (on the cpu
        backend: a worker thread), closed afterwards. With one, the launch is queued on
        it and the whole stream is awaited; errors of work on the stream are raised
        here. If the waiting task is cancelled, the kernel (which cannot be interrupted)
        is still awaited, shielded, before the cancellation propagates: no launch
        outlives the call.
        """
        chosen = self._choose_backend(args, stream, backend)
        own = stream is None
        queue = chosen.create_stream() if stream is None else stream
        try:
            self._launch(args, grid, block, size, queue, chosen, shared_mem)
            await wait_shielded_on_cancel(queue)
            queue.synchronize()
        finally:
            if own:
                queue.close()

    def config_for(
        self,
        *args: Any,
        grid: Dims | None = None,
        block: Dims | None = None,
        size: Any = None,
        backend: Backend | str | None = None,
    ) -> LaunchConfig:
        """The launch configuration a launch with these arguments would use."""
        chosen = self._choose_backend(args, None, backend)
        return self._config(args, grid, block, size, chosen)

    # -- internals ------------------------------------------------------------------------

    def _choose_backend(
        self, args: tuple[Any, ...], stream: Stream | None, backend: Backend | str | None
    ) -> Backend:
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(
                f"stream must be a pdc Stream (backend.create_stream()), not {stream!r}"
            )
        candidates: list[tuple[str, Backend]] = []
        if backend is not None:
            resolved = resolve_backend(backend)
            candidates.append((f"backend= names {resolved.qualified_name}", resolved))
        elif self.backend is not None:
            resolved = resolve_backend(self.backend)
            candidates.append((f"the kernel's backend is {resolved.qualified_name}", resolved))
        if stream is not None:
            candidates.append((f"the stream is on {stream.backend.qualified_name}", stream.backend))
        for position, arg in enumerate(args):
            if isinstance(arg, UnifiedBuffer):
                where = arg.backend.qualified_name
                candidates.append(
                    (f"argument {position} (a UnifiedBuffer) is on {where}", arg.backend)
                )
        if not candidates:
            return resolve_backend(None)
        first, chosen = candidates[0]
        for other, candidate in candidates[1:]:
            if candidate.qualified_name != chosen.qualified_name:
                raise ValueError(
                    f"kernel {self.name!r} cannot run on two backends: {first}, but {other}"
                )
        return chosen

    def _config(
        self,
        args: tuple[Any, ...],
        grid: Dims | None,
        block: Dims | None,
        size: Any,
        backend: Backend,
    ) -> LaunchConfig:
        self._check_argument_kinds(args)
        max_threads = _max_threads(backend)
        block_dims = dims(block, "block") if block is not None else self.block
        grid_dims = dims(grid, "grid") if grid is not None else self.grid
        if grid_dims is not None:
            if block_dims is None:
                sizes = self._sizes(args, size, len(grid_dims), missing="block= (or size=)")
                block_dims = auto_block(sizes, max_threads)
            check_block(block_dims, max_threads)
            check_grid(grid_dims, block_dims)
            return LaunchConfig(grid=grid_dims, block=block_dims)
        ndim = len(block_dims) if block_dims is not None else None
        return launch_config(
            self._sizes(args, size, ndim), block_dims, max_threads_per_block=max_threads
        )

    def _sizes(
        self, args: tuple[Any, ...], size: Any, ndim: int | None, missing: str = "size= or grid="
    ) -> tuple[int, ...]:
        if size is not None:
            sizes = problem_size(size)
        else:
            shape: tuple[int, ...] | None = None
            for arg in args:
                if isinstance(arg, UnifiedBuffer) or _is_array(arg):
                    candidate = tuple(int(extent) for extent in arg.shape)
                    if candidate:
                        shape = candidate
                        break
            if shape is None:
                raise ValueError(
                    f"kernel {self.name!r} has no array argument to size the launch by; "
                    f"give {missing}"
                )
            sizes = shape[: ndim if ndim is not None else 3]
        if ndim is not None:
            if len(sizes) > ndim:
                raise ValueError(
                    f"kernel {self.name!r}: size {sizes} has {len(sizes)} dimensions but the "
                    f"block has {ndim}"
                )
            sizes = sizes + (1,) * (ndim - len(sizes))
        return sizes

    def _check_argument_kinds(self, args: tuple[Any, ...]) -> None:
        """Refuse Python containers before anything sizes the launch by the arguments."""
        for position, arg in enumerate(args):
            if isinstance(arg, _CONTAINERS):
                hint = (
                    "np.asarray(...) or a UnifiedBuffer"
                    if isinstance(arg, list)
                    else "an array or a scalar"
                )
                parameter = ""
                if self._signature is not None:
                    names = list(self._signature.parameters)
                    if position < len(names):
                        parameter = f" for parameter {names[position]!r}"
                raise TypeError(
                    f"argument {position} of kernel {self.name!r} is a {type(arg).__name__}; "
                    f"{_TAKES}: pass {hint}{parameter}"
                )

    def _check_capability(self, backend: Backend) -> None:
        if self._body is not None:
            needed, action = Capability.PYTHON_KERNELS, "run kernel bodies written in Python"
            hint = ""
        else:
            needed, action = Capability.KERNELS, "compile and launch kernel source"
            hint = (
                " CUDA C source runs on the cuda backend (pip install pdc-cuda); write the "
                "body in Python (numba.cuda style) to run it on every backend."
            )
        if not backend.has(needed):
            declared = ", ".join(sorted(backend.capabilities)) or "none"
            able = [
                info.name
                for info in available_backends()
                if info.availability.available and needed in info.capabilities
            ]
            if able:
                hint += f" Backends here that can: {', '.join(able)} (pass backend=...)."
            raise CapabilityError(
                f"kernel {self.name!r} cannot run on the {backend.qualified_name} backend: it "
                f"has no {needed.value} capability, so it cannot {action} (it declares: "
                f"{declared}).{hint}"
            )

    def _warn_if_slow(self, config: LaunchConfig, backend: Backend) -> None:
        threads = config.threads
        if threads <= _SIMULATOR_WARN_THREADS:
            return
        warnings.warn(
            f"kernel {self.name!r} launches {threads:,} threads (grid {config.grid} x block "
            f"{config.block}) on {backend.qualified_name}, which simulates every thread on "
            "the CPU: the simulator runs roughly 10^6-10^7 simple threads per second, so "
            f"this may take {threads // 10**7:,} to {threads // 10**6:,} seconds. Run it on "
            "a GPU backend, or launch fewer threads (a smaller problem, or a grid-stride "
            "loop over a smaller grid)",
            _SlowSimulationWarning,
            stacklevel=_caller_stacklevel(),
        )

    def _compiled_for(self, backend: Backend) -> Any:
        key = backend.qualified_name
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                assert self._source is not None
                compiled = backend.compile_kernel(self._source, self.name, self._compile_options)
                self._compiled[key] = compiled
        return compiled

    def _launch(
        self,
        args: tuple[Any, ...],
        grid: Dims | None,
        block: Dims | None,
        size: Any,
        stream: Stream | None,
        backend: Backend | str | None,
        shared_mem: int,
    ) -> None:
        chosen = self._choose_backend(args, stream, backend)
        self._check_capability(chosen)
        shared_bytes = _check_shared_mem(shared_mem, chosen)
        if self._signature is not None:
            try:
                self._signature.bind(*args)
            except TypeError as exc:
                raise TypeError(
                    f"kernel {self.name}{self._signature} called with {len(args)} "
                    f"argument(s): {exc}"
                ) from None
        config = self._config(args, grid, block, size, chosen)
        if config.empty:
            return
        if self._body is not None and chosen.name in _SIMULATING_BACKENDS:
            self._warn_if_slow(config, chosen)
        converted, copy_back = _convert_arguments(self.name, args, chosen, stream)
        if self._body is not None:
            chosen.run_python_kernel(
                self._body,
                config.grid3,
                config.block3,
                converted,
                shared_mem=shared_bytes,
                stream=stream,
                options=self._python_options,
            )
        else:
            chosen.launch_kernel(
                self._compiled_for(chosen),
                config.grid3,
                config.block3,
                converted,
                shared_mem=shared_bytes,
                stream=stream,
            )
        for device, host in copy_back:
            chosen.to_host(device, out=host, stream=stream)


#: numba dispatcher attributes a pdc Kernel does not have (explained when asked for).
_NUMBA_DISPATCHER_ONLY: Final = frozenset(
    {
        "specialize",
        "specialized",
        "extensions",
        "overloads",
        "definitions",
        "compile",
        "compile_device",
        "configure",
        "inspect_types",
        "inspect_llvm",
        "inspect_asm",
        "inspect_sass",
        "inspect_sass_cfg",
        "get_regs_per_thread",
        "get_const_mem_size",
        "get_shared_mem_per_block",
        "get_max_threads_per_block",
        "get_local_mem_per_thread",
        "get_call_template",
        "signatures",
        "targetoptions",
        "typingctx",
        "targetctx",
        "disable_compile",
        "enable_caching",
    }
)


def _convert_arguments(
    name: str, args: tuple[Any, ...], backend: Backend, stream: Stream | None
) -> tuple[tuple[Any, ...], list[tuple[Any, np.ndarray[Any, Any]]]]:
    """Kernel ``name``'s arguments as the backend takes them, and the NumPy arrays to
    copy back after the launch (device copy, original)."""
    unified = backend.has(Capability.UNIFIED_MEMORY)
    copy_back: list[tuple[Any, np.ndarray[Any, Any]]] = []

    def convert(arg: Any, where: str) -> Any:
        if isinstance(arg, UnifiedBuffer):
            return arg.device
        if isinstance(arg, np.ndarray):
            if unified:
                return arg
            if not arg.flags.c_contiguous:
                raise ValueError(
                    f"{where} is a non-contiguous NumPy array; the {backend.name} backend "
                    "copies NumPy arguments to the device and back, which needs "
                    "np.ascontiguousarray(...)"
                )
            device = backend.to_device(arg, stream=stream)
            if arg.flags.writeable:
                copy_back.append((device, arg))
            return device
        if isinstance(arg, _SCALARS):
            return arg
        if isinstance(arg, enum.Enum):
            return arg  # an enum member, compared and read (.value) as numba does
        if isinstance(arg, tuple):
            # tuples (nested, empty) of arrays and scalars, as numba takes them
            items = [convert(item, f"item {i} of {where}") for i, item in enumerate(arg)]
            # a namedtuple stays one (its fields are read by name in the body)
            return tuple(items) if type(arg) is tuple else type(arg)(*items)
        if isinstance(arg, _CONTAINERS):
            raise TypeError(f"{where} is a {type(arg).__name__}; {_TAKES}")
        if hasattr(arg, "__cuda_array_interface__") and unified:
            raise TypeError(
                f"{where} is a CUDA device array ({type(arg).__name__}) but the "
                f"{backend.name} backend computes on host memory; pass a NumPy array or "
                "run on the cuda backend"
            )
        if unified and hasattr(arg, "__array_interface__"):
            return _host_view(arg)
        if _is_array(arg):
            return arg  # a device array of the backend: it checks its own
        raise TypeError(
            f"{where} is a {type(arg).__name__}; {_TAKES} (or the backend's own device arrays)"
        )

    converted = [
        convert(arg, f"argument {position} of kernel {name!r}") for position, arg in enumerate(args)
    ]
    return tuple(converted), copy_back


def _numba_python_function(body: Any) -> Any:
    """The Python function of a numba dispatcher (``@numba.cuda.jit``), else ``body``:
    a kernel already decorated with numba's jit is made a pdc kernel from its function."""
    inner = getattr(body, "py_func", None)
    if isinstance(inner, types.FunctionType) and type(body).__module__.startswith("numba"):
        return inner
    return body


class _InterfaceOnly:
    """An object exposing only another's ``__array_interface__`` (and keeping it alive)."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.__array_interface__ = owner.__array_interface__


def _host_view(arg: Any) -> np.ndarray[Any, Any]:
    """A NumPy view of the host memory an array-like exposes, writable unless it says
    read-only: through ``__array_interface__`` alone, since NumPy prefers other
    protocols (``__array_struct__``, ``__array__``) that some wrappers answer with a
    copy or a read-only view (numba's simulated device array of a record array)."""
    return np.asarray(_InterfaceOnly(arg))


class ConfiguredKernel:
    """A kernel with a fixed grid and block: what ``kernel[grid, block]`` returns."""

    def __init__(
        self,
        kernel: Kernel,
        grid: tuple[int, ...],
        block: tuple[int, ...],
        stream: Stream | None,
        shared_mem: int,
    ) -> None:
        self.kernel = kernel
        self.grid = grid
        self.block = block
        self.stream = stream
        self.shared_mem = shared_mem

    def __repr__(self) -> str:
        return f"{self.kernel!r}[{self.grid}, {self.block}]"

    def __call__(self, *args: Any) -> None:
        """Launch; returns after completion unless a stream was given."""
        self.kernel(
            *args, grid=self.grid, block=self.block, stream=self.stream, shared_mem=self.shared_mem
        )

    async def launch_async(self, *args: Any) -> None:
        """Launch and wait without blocking the event loop (see :meth:`Kernel.launch_async`)."""
        await self.kernel.launch_async(
            *args, grid=self.grid, block=self.block, stream=self.stream, shared_mem=self.shared_mem
        )


class _KernelDecorator:
    """``@kernel``, ``@kernel(block=(256,), grid=None, backend=None, name=None, options=None)``
    and ``kernel.source(...)``: see :class:`Kernel`."""

    @overload
    def __call__(self, body: Callable[..., Any], /) -> Kernel: ...

    @overload
    def __call__(
        self,
        /,
        *,
        block: Dims | None = None,
        grid: Dims | None = None,
        backend: Backend | str | None = None,
        name: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Callable[[Callable[..., Any]], Kernel]: ...

    def __call__(
        self,
        body: Callable[..., Any] | None = None,
        /,
        *,
        block: Dims | None = None,
        grid: Dims | None = None,
        backend: Backend | str | None = None,
        name: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Kernel | Callable[[Callable[..., Any]], Kernel]:
        """Make a Python function a kernel, with an optional fixed block and grid.

        ``block`` and ``grid`` are ints or tuples of up to three ints; without a block
        one is chosen per launch from the problem size (:func:`launch_config`).
        ``backend`` pins the kernel to a backend. ``options`` go to the backend's
        ``run_python_kernel``: ``{"cpu_mode": "auto" | "lanes" | "threads"}`` on the cpu
        backend (see :func:`pdc_core.cuda.simulate`), ``numba.cuda.jit`` keywords on
        cuda.
        """
        if body is not None:
            if not callable(body) or isinstance(body, tuple | list | int):
                raise TypeError(
                    f"@kernel takes a function; give a block as @kernel(block={body!r})"
                )
            return Kernel(body, block=block, grid=grid, backend=backend, name=name, options=options)

        def decorate(function: Callable[..., Any]) -> Kernel:
            return Kernel(
                function, block=block, grid=grid, backend=backend, name=name, options=options
            )

        return decorate

    def source(
        self,
        source: str,
        *,
        name: str | None = None,
        block: Dims | None = None,
        grid: Dims | None = None,
        backend: Backend | str | None = None,
        options: Sequence[str] = (),
    ) -> Kernel:
        """A kernel from CUDA C source, compiled on first launch per device.

        ``name`` is the ``extern "C" __global__`` function to launch (optional when the
        source defines exactly one); ``options`` are compiler flags (NVRTC's, such as
        ``("-O3", "--use_fast_math")``). Compiled with the backend's ``compile_kernel``
        and launched with its ``launch_kernel``: pass arguments in the C function's
        order, scalars as NumPy scalars of the C type (``np.int32(n)`` for ``int n``),
        and ``size=`` or ``grid=`` when the first array does not give the problem size.
        """
        return Kernel(
            source=source, name=name, block=block, grid=grid, backend=backend, options=options
        )


#: The kernel decorator: ``@kernel``, ``@kernel(block=(256,))``, ``kernel.source(src)``.
kernel: Final = _KernelDecorator()
