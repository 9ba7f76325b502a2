"""The resident ring kernel on CUDA: launch, watch, stop.

``CudaBackend.launch_persistent_kernel(kernel, rings, **options)`` (the contract of
:meth:`pdc_core.Backend.launch_persistent_kernel`) renders ``ring_kernel.cu`` around
the kernel's CUDA body, compiles it with NVRTC, and launches it **once**, one thread
block, on a fresh non-blocking stream, pointed at the ring region the core allocated
in mapped pinned (portable) memory -- all in the context its placement names
(:mod:`pdc_cuda._places`: by default a context pdc owns, so that nothing the rest of
the process loads or frees in the primary context waits for it). From then on a
message costs host stores and loads into that memory; the core's
:class:`~pdc_core.PersistentKernelSession` does the host side of the protocol.

Before launching it refuses, with :class:`~pdc_core.CapabilityError`, a device that
cannot map host memory, one older than compute capability 7.0 (``__nanosleep``), and
one with a display watchdog (``kernelExecTimeoutEnabled``, which kills long kernels)
unless ``allow_watchdog=True``. While the kernel is resident the backend waits for no
whole-device event (see :class:`~pdc_cuda.CudaBackend`). Stopping is the protocol's
stop word; :attr:`CudaResidentKernel.exited` polls ``stream.done`` (never blocks), and
a kernel that does not stop in time is reported by the core as
:class:`~pdc_core.KernelStopTimeout` -- CUDA cannot kill one kernel, so its memory is
then kept and the process's CUDA context has to go.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from pdc_core import Backend, CapabilityError, DeviceSource
from pdc_core.backend import (
    PersistentKernelSpec,
    ResidentKernel,
    RingHost,
    RingMemory,
    strict_int,
)

from ._nvrtc import find_nvrtc, min_compute_capability
from ._places import ContextKind, LaunchSite, ResidentPlace, check_state, context_kind
from ._residency import Residency
from ._ring_source import KERNEL_NAME, CudaRingBody, RingWiring, render_ring_kernel

__all__ = [
    "LAUNCH_OPTIONS",
    "CudaResidentKernel",
    "LaunchOptions",
    "launch_persistent_kernel",
    "preload_persistent_kernels",
    "render_kernel",
    "ring_body",
]


@dataclass(frozen=True)
class LaunchOptions:
    """The launch options of a resident kernel (or of every stage of a pipeline) on
    CUDA, as ``open_persistent_kernel(..., **options)`` passes them, typed and checked
    in one place: :meth:`parse`, which the backend calls before anything is rendered,
    compiled or allocated (the core asks it before allocating the rings:
    ``CudaBackend.check_launch_options``). ``None`` keeps the body's own setting."""

    #: The block size (1..1024).
    threads: int | None = None
    #: The idle polling back-off, in ns (0..1000000).
    backoff_min_ns: int | None = None
    backoff_max_ns: int | None = None
    #: Launch even on a device with a display watchdog.
    allow_watchdog: bool = False
    #: Extra NVRTC options, after the body's own.
    compile_options: tuple[str, ...] = ()
    #: Where the kernel runs (``"own"``, ``"green"``, ``"shared"``); the backend's own
    #: placement when None.
    context: ContextKind | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any] | LaunchOptions) -> LaunchOptions:
        """``options`` (keyword arguments of a launch) as :class:`LaunchOptions`.

        An unknown name (a misspelt option) is a ``TypeError`` naming it and listing
        the accepted ones; a value of the wrong type a ``TypeError``, one out of range a
        ``ValueError``, each naming the option and the value as given.
        """
        if isinstance(options, LaunchOptions):
            return options
        unknown = sorted(set(options) - LAUNCH_OPTIONS)
        if unknown:
            raise TypeError(
                f"unknown CUDA launch option(s) {', '.join(unknown)}; the cuda backend accepts "
                f"{', '.join(sorted(LAUNCH_OPTIONS))}"
            )
        values: dict[str, Any] = {}
        if "threads" in options:
            threads = strict_int(options["threads"], "threads", "an int in 1..1024")
            if not 1 <= threads <= 1024:
                raise ValueError(f"threads must be an int in 1..1024, not {options['threads']!r}")
            values["threads"] = threads
        for name in ("backoff_min_ns", "backoff_max_ns"):
            if name in options:
                value = strict_int(options[name], name, "an int in 0..1000000 ns")
                if not 0 <= value <= 1_000_000:
                    raise ValueError(f"{name} must be an int in 0..1000000 ns, not {value!r}")
                values[name] = value
        if "allow_watchdog" in options:
            allow = options["allow_watchdog"]
            if not isinstance(allow, bool):
                raise TypeError(
                    f"allow_watchdog must be True or False, got {type(allow).__name__} {allow!r}"
                )
            values["allow_watchdog"] = allow
        if "compile_options" in options:
            extra = options["compile_options"]
            if isinstance(extra, str):
                raise TypeError("compile_options must be a sequence of strings, not one string")
            try:
                values["compile_options"] = tuple(extra)
            except TypeError:
                raise TypeError(
                    f"compile_options must be a sequence of strings, got {type(extra).__name__}"
                ) from None
            bad = [item for item in values["compile_options"] if not isinstance(item, str)]
            if bad:
                raise TypeError(f"compile_options must be strings, got {bad[0]!r}")
        if options.get("context") is not None:
            values["context"] = context_kind(options["context"])
        return cls(**values)

    def overrides(self) -> dict[str, int]:
        """The body settings this launch sets (``threads`` and the back-off)."""
        names = ("threads", "backoff_min_ns", "backoff_max_ns")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


#: Launch options accepted by ``open_persistent_kernel(..., **options)`` on CUDA.
LAUNCH_OPTIONS = frozenset(field.name for field in fields(LaunchOptions))
#: A launch without options.
NO_OPTIONS = LaunchOptions()


def ring_body(
    kernel: PersistentKernelSpec, options: Mapping[str, Any] | LaunchOptions
) -> tuple[CudaRingBody, tuple[str, ...]]:
    """The :class:`CudaRingBody` and compiler options for ``kernel`` on CUDA.

    The kernel's ``cuda`` body may be a :class:`~pdc_core.DeviceSource` (or a string,
    which the core turns into one) or a :class:`CudaRingBody`. Launch ``options``
    (:meth:`LaunchOptions.parse`) override the body's ``threads`` and back-off.
    """
    launch = LaunchOptions.parse(options)
    source = kernel.body_for("cuda")
    compile_options: tuple[str, ...] = ()
    if isinstance(source, DeviceSource):
        body = CudaRingBody(source.source, body_name=source.entry)
        compile_options = tuple(source.options)
    elif isinstance(source, CudaRingBody):
        body = source
    else:
        raise TypeError(
            f"the cuda body of persistent kernel {kernel.name!r} must be CUDA C source (a str or "
            f"DeviceSource) or a CudaRingBody, not {type(source).__name__}"
        )
    changes: dict[str, Any] = {"max_batch": min(body.max_batch, kernel.max_batch)}
    changes.update(launch.overrides())
    if (
        launch.threads is None
        and body.threads == CudaRingBody.__dataclass_fields__["threads"].default
    ):
        # No more threads than a batch can use (at least one warp).
        changes["threads"] = min(body.threads, max(32, -(-kernel.max_batch // 32) * 32))
    body = replace(body, **changes)
    return body, (*compile_options, *launch.compile_options)


def check_device(
    site: LaunchSite, allow_watchdog: bool, nvrtc_version: tuple[int, int] | None = None
) -> None:
    """Raise :class:`CapabilityError` unless ``site``'s device can host a resident ring
    kernel compiled by the NVRTC in use (``nvrtc_version``; default: the one that loads)."""
    props = site.properties
    where = f"{site.name} ({props.name})"
    site.require_mapped_memory("run a resident ring kernel")
    version = nvrtc_version if nvrtc_version is not None else find_nvrtc().version
    oldest = min_compute_capability(version)
    if (props.major, props.minor) < oldest:
        raise CapabilityError(
            f"{where} has compute capability {props.compute_capability}; the resident ring "
            f"kernel compiled by NVRTC {version[0]}.{version[1]} (the CUDA {version[0]} "
            f"toolkit) needs {oldest[0]}.{oldest[1]} or newer (__nanosleep, system-scope "
            "acquire/release"
            + (
                "; CUDA 13 dropped compute_70 and compute_72, CUDA 12's NVRTC still has them)"
                if version[0] >= 13
                else ")"
            )
        )
    if props.kernel_exec_timeout_enabled and not allow_watchdog:
        raise CapabilityError(
            f"{where} has a display watchdog (kernelExecTimeoutEnabled): it kills a kernel "
            "that runs for more than a few seconds, so a resident kernel would die. Use a GPU "
            "without a display, or pass allow_watchdog=True to try anyway"
        )


class CudaResidentKernel(ResidentKernel):
    """One resident ring kernel on a CUDA device (what ``launch_persistent_kernel`` returns).

    ``wake`` does nothing: the kernel polls the control block itself. ``exited``
    queries the stream without blocking; a fault of the kernel's execution (an illegal
    address in the body, ...) makes it ``exited`` with :attr:`failure` set, which the
    core reports as a crash. :attr:`place` is where it runs: a context of pdc's own
    by default, the primary context with ``context="shared"``.
    """

    def __init__(
        self,
        backend: Backend,
        kernel: PersistentKernelSpec,
        memory: RingMemory,
        compiled: Any,
        stream: Any,
        state: Any,
        config: CudaRingBody,
        *,
        place: ResidentPlace,
        residency: Residency,
    ) -> None:
        super().__init__(backend, kernel, memory)
        self.place = place
        self.residency = residency
        self.compiled = compiled
        self.stream = stream
        self.state_array = state
        self.config = config
        #: The state's host shape and dtype, for :meth:`read_state`.
        self._state_like = None if kernel.state is None else np.asarray(kernel.state)
        self._failure: BaseException | None = None
        self._exited = False
        self._released = False
        #: The state copied to the host when the kernel was released (after its stop).
        self._final_state: npt.NDArray[Any] | None = None

    @property
    def shares_primary(self) -> bool:
        """Whether the kernel runs in the primary context (placement ``"shared"``)."""
        return self.place.shares_primary

    @property
    def partition(self) -> int | None:
        """The SMs of its context's partition (a green context's), else None."""
        return self.place.partition(self.compiled)

    @property
    def label(self) -> str:
        """The kernel's name (for messages)."""
        return repr(self.kernel.name)

    def wake(self) -> None:
        """Nothing to do: the kernel polls ``IN_HEAD``/``STOP``/``PAUSE`` itself."""

    @property
    def exited(self) -> bool:
        """True once the kernel's stream is done, or failed (then :attr:`failure` is set).

        Queries the stream without blocking; a status other than success or not-ready
        (an illegal address in the body, a launch failure) counts as exited, so the
        session reports a crash instead of waiting for ``DONE``.
        """
        if self._exited:
            return True
        try:
            done = self.stream.done
        except Exception as exc:  # the kernel's execution failed
            self._failure = exc
            done = True
        if done:
            self._exited = True  # the residency forgets it at its next collect()
        return bool(done)

    @property
    def failure(self) -> BaseException | None:
        self.exited  # noqa: B018 - refreshes _failure
        return self._failure

    def read_state(self) -> npt.NDArray[Any] | None:
        """A host copy of the device-resident state; consistent while paused or after
        the stop (the state is then the copy taken when the kernel was released).

        Copied on a fresh non-blocking side stream of the kernel's context into pageable
        memory, so it waits for that copy only -- never for the kernel or the device.
        """
        if self.state_array is None or self._state_like is None:
            return None if self._final_state is None else self._final_state.copy()
        out = np.empty_like(self._state_like)
        return self.place.read(self.state_array, out)

    def release(self) -> None:
        """Drop the stream and the state (the core owns the rings); never waits.

        Called after :attr:`exited`. The stream is discarded without synchronizing (it
        is done, or failed). State in a context pdc owns goes to that context's free
        (made at once, or deferred while a kernel runs there); while other kernels are
        resident on the device, the ring memory (and state in the primary context) is
        handed to the residency's deferred frees, so that freeing it (``cudaFreeHost``
        may wait for a running kernel) happens only once no kernel is resident.
        """
        if self._released:
            return
        self._released = True
        self.residency.forget(self)
        self.stream.discard()
        if self.state_array is not None and self._failure is None:
            try:
                self._final_state = self.read_state()
            except Exception:  # a failed context: there is no state to keep
                self._final_state = None
        state, self.state_array = self.state_array, None
        free = getattr(state, "free", None)
        if callable(free):  # memory of a context pdc owns: its own deferral queue
            free()
            state = None
        # The allocation itself: the session detaches the ring memory from it next.
        if self.residency.collect():
            self.residency.defer_free((self.memory.owner, state))


def render_kernel(
    kernel: PersistentKernelSpec, options: Mapping[str, Any] | LaunchOptions, wiring: RingWiring
) -> tuple[CudaRingBody, str, tuple[str, ...]]:
    """What the launch of ``kernel`` (a kernel of its own, or a pipeline stage: ``wiring``)
    with launch ``options`` compiles: its body, the rendered source and NVRTC options.
    The one place a launch renders (``pdc_cuda.testing`` renders through it too)."""
    body, compile_options = ring_body(kernel, options)
    state_dtype = kernel.state.dtype if kernel.state is not None else None
    source = render_ring_kernel(body, kernel.request_dtype, kernel.reply_dtype, state_dtype, wiring)
    return body, source, compile_options


def preload_persistent_kernels(
    site: LaunchSite, kernels: Sequence[PersistentKernelSpec], options: LaunchOptions
) -> None:
    """Compile and load every kernel of ``kernels`` into one context of ``site``'s place,
    as their launches with ``options`` will (a kernel's own rings, sequenced input when
    ``sequenced_input``), before any is launched: launched one after another they then
    share that context and load nothing beside each other."""
    sequenced = bool(getattr(site.backend, "ring_sequenced_input", False))
    specs = []
    for kernel in kernels:
        if not isinstance(kernel, PersistentKernelSpec):
            raise TypeError(f"expected PersistentKernel objects, not {type(kernel).__name__}")
        wiring = RingWiring(sequenced_input=sequenced)
        _, source, compile_options = render_kernel(kernel, options, wiring)
        specs.append((source, KERNEL_NAME, compile_options))
    site.place.compile(specs)


def launch_persistent_kernel(
    site: LaunchSite,
    kernel: PersistentKernelSpec,
    rings: RingMemory,
    options: LaunchOptions = NO_OPTIONS,
) -> CudaResidentKernel:
    """Compile and launch ``kernel``'s resident loop on ``rings`` in ``site``'s place
    (chosen from ``options.context`` by the caller); see the module docs."""
    if not isinstance(kernel, PersistentKernelSpec):
        raise TypeError(f"expected a PersistentKernel, not {type(kernel).__name__}")
    if not isinstance(rings, RingMemory):
        raise TypeError(f"expected the RingMemory the core allocated, not {type(rings).__name__}")
    wiring = RingWiring(sequenced_input=rings.layout.sequenced_input)
    body, source, compile_options = render_kernel(kernel, options, wiring)
    check_device(site, options.allow_watchdog)
    place, residency = site.place, site.residency
    state_host = check_state(kernel.state, f"placement {place.kind!r}")
    (compiled,) = place.compile([(source, KERNEL_NAME, compile_options)])
    threads = min(body.threads, compiled.max_threads_per_block)
    address = place.region_address(compiled, rings)
    state = None if state_host is None else place.upload(compiled, state_host)
    stream = place.create_stream(compiled)
    resident = CudaResidentKernel(
        site.backend, kernel, rings, compiled, stream, state, body, place=place, residency=residency
    )
    state_arg = state if state is not None else np.uint64(0)
    try:
        residency.register(resident)
        region = np.uint64(address)  # its own input and output region
        compiled.launch((1,), (threads,), (region, region, state_arg), stream=stream)
    except BaseException:
        # Interrupted or failed: should the launch have been queued after all, the
        # kernel finds STOP = NOW at its first poll, and the rings stay alive until
        # the stream has passed it (a non-blocking stream: never the device).
        RingHost.force_stop(rings)
        with contextlib.suppress(Exception):
            stream.synchronize()
        residency.forget(resident)
        stream.discard()
        raise
    return resident
