"""The resident ring kernel's CUDA C: the loop template and the user's device function.

:func:`render_ring_kernel` fills ``ring_kernel.cu`` (shipped as package data) with the
control-block constants of :mod:`pdc_core.backend` (so the layout has one source of
truth), C structs generated from the request and reply dtypes, and the user's source,
which must define::

    __device__ int pdc_body(const pdc_request& request, pdc_reply& reply);

(another name with ``body_name=``). It is called once per request by one thread of
the block; returning non-zero stops the kernel with that error code (1 for a generic
failure, 256 and up for codes of your own), which the host raises as
:class:`~pdc_core.PersistentKernelError` and callers see as ``ActorCrashed``.

:func:`compile_ring_kernel_ptx` compiles the result with NVRTC alone: no GPU needed,
so CI proves a body compiles inside the template.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from pdc_core.backend import (
    ERROR_MESSAGE_SIZE,
    RING_MAGIC,
    RING_VERSION,
    ErrorCode,
    Offset,
    RingLayout,
    StopMode,
    strict_int,
)

from ._codegen import PRELUDE, c_struct
from ._nvrtc import DEFAULT_ARCH, compile_to_ptx

__all__ = [
    "KERNEL_NAME",
    "CudaRingBody",
    "RingWiring",
    "compile_ring_kernel_ptx",
    "render_ring_kernel",
    "ring_template",
    "stage_error_prefix",
]

#: The ``extern "C"`` name of the resident kernel in the rendered source.
KERNEL_NAME = "pdc_ring_kernel"

_TEMPLATE_LINE_MARKER = '#line @@TEMPLATE_LINE@@ "pdc_ring_kernel.cu"'

#: The scope of a region's ordered accesses: ``system`` where the other side is the
#: host or another device (mapped host memory), ``device`` where it is a kernel on the
#: same device (a link in device memory).
Scope = Literal["system", "device"]

_SCOPES: dict[str, str] = {
    "system": "cuda::thread_scope_system",
    "device": "cuda::thread_scope_device",
}


def stage_error_prefix(index: int, name: str) -> str:
    """How a pipeline stage's error message begins (``docs/ring-protocol.md`` section 11):
    ``stage <index> ('<kernel name>'): ``, the name as Python's ``repr`` writes it."""
    return f"stage {index} ({name!r}): "


def _c_string(text: str) -> str:
    """``text`` as a C string literal of its UTF-8 bytes (octal escapes outside
    printable ASCII, and for quotes and backslashes)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if 0x20 <= byte < 0x7F and char not in '"\\?':
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


@dataclass(frozen=True)
class RingWiring:
    """Where a resident kernel's rings are and whom it answers to.

    A kernel of its own reads its region's input ring and writes the same region's
    output ring, both in mapped host memory (the default). A stage of a pipeline
    (``docs/ring-protocol.md`` section 11) reads its input region, whose words it
    accesses at ``input_scope``, and writes into an output ring at ``output_scope``:
    the next stage's input ring when ``output_link`` (the kernel is that link's host:
    it stores ``IN_HEAD``, ``STOP`` and ``PAUSE`` there and passes control down), else
    the host region's output ring. ``stage`` is ``(index, kernel name)`` for a stage,
    whose error messages then begin with :func:`stage_error_prefix`.
    ``sequenced_input``: the input ring's slots carry sequence words
    (``RingLayout.sequenced_input``; ``docs/ring-protocol.md`` section 12), which the
    kernel polls instead of ``IN_HEAD``.
    """

    input_scope: Scope = "system"
    output_scope: Scope = "system"
    output_link: bool = False
    stage: tuple[int, str] | None = None
    sequenced_input: bool = False

    def __post_init__(self) -> None:
        for name in ("input_scope", "output_scope"):
            if getattr(self, name) not in _SCOPES:
                raise ValueError(
                    f"{name} must be 'system' or 'device', not {getattr(self, name)!r}"
                )
        if self.output_link and self.stage is None:
            raise ValueError("a kernel whose output ring is a link must be a pipeline stage")

    @property
    def prefix(self) -> str:
        """What every error message of this kernel begins with."""
        return "" if self.stage is None else stage_error_prefix(*self.stage)


@dataclass(frozen=True)
class CudaRingBody:
    """The CUDA side of a persistent kernel: the user's source and how to run it.

    ``source`` defines ``__device__ int <body_name>(const pdc_request&, pdc_reply&)``
    (plus any helpers or ``__device__`` globals it needs). ``threads`` is the block
    size (requests of a batch are spread over the threads); ``max_batch`` caps the
    requests handled between two publications of replies; the kernel sleeps between
    polls while idle, from ``backoff_min_ns`` doubling up to ``backoff_max_ns``.
    """

    source: str
    body_name: str = "pdc_body"
    threads: int = 128
    max_batch: int = 4096
    backoff_min_ns: int = 64
    backoff_max_ns: int = 256
    filename: str = "pdc_body.cu"

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("a CUDA ring body needs CUDA C source defining its device function")
        if not self.body_name.isidentifier():
            raise ValueError(f"body_name must be a C identifier, not {self.body_name!r}")
        if self.body_name not in self.source:
            raise ValueError(
                f"the CUDA source does not mention its body function {self.body_name!r}; define "
                f"__device__ int {self.body_name}(const pdc_request& request, pdc_reply& reply)"
            )
        threads = strict_int(self.threads, "threads", "an int in 1..1024")
        if not 1 <= threads <= 1024:
            raise ValueError(f"threads must be an int in 1..1024, not {self.threads!r}")
        object.__setattr__(self, "threads", threads)  # a NumPy integer, as an int
        max_batch = strict_int(self.max_batch, "max_batch", "a positive int")
        if max_batch < 1:
            raise ValueError(f"max_batch must be a positive int, not {self.max_batch!r}")
        object.__setattr__(self, "max_batch", max_batch)
        for name in ("backoff_min_ns", "backoff_max_ns"):
            value = strict_int(getattr(self, name), name, "an int in 0..1000000 ns")
            if not 0 <= value <= 1_000_000:
                raise ValueError(f"{name} must be an int in 0..1000000 ns, not {value!r}")
            object.__setattr__(self, name, value)
        if self.backoff_min_ns > self.backoff_max_ns:
            raise ValueError(
                f"backoff_min_ns ({self.backoff_min_ns}) is larger than backoff_max_ns "
                f"({self.backoff_max_ns})"
            )
        if any(char in self.filename for char in '"\n\\'):
            raise ValueError(f"filename {self.filename!r} cannot appear in a #line directive")


def ring_template() -> str:
    """The loop template, as shipped in the package (``pdc_cuda/ring_kernel.cu``)."""
    return (
        importlib.resources.files("pdc_cuda").joinpath("ring_kernel.cu").read_text(encoding="utf-8")
    )


def _constants() -> str:
    lines = [f"#define PDC_OFF_{offset.name} {int(offset)}ull" for offset in Offset]
    lines += [
        f"#define PDC_RING_MAGIC {RING_MAGIC}u",
        f"#define PDC_RING_VERSION {RING_VERSION}u",
        f"#define PDC_ERROR_MESSAGE_SIZE {ERROR_MESSAGE_SIZE}u",
    ]
    lines += [f"#define PDC_STOP_{mode.name} {int(mode)}u" for mode in StopMode]
    lines += [f"#define PDC_ERROR_{code.name} {int(code)}u" for code in ErrorCode]
    return "\n".join(lines)


def render_ring_kernel(
    body: CudaRingBody | str,
    request_dtype: npt.DTypeLike,
    reply_dtype: npt.DTypeLike,
    state_dtype: npt.DTypeLike | None = None,
    wiring: RingWiring | None = None,
) -> str:
    """The complete CUDA C source of the resident kernel for ``body`` and two record dtypes.

    With ``state_dtype`` the body takes a third argument, ``pdc_state* state``.
    ``wiring`` says where the rings are (default: a kernel of its own, both rings in
    mapped host memory). The kernel is ``pdc_ring_kernel(unsigned char* in_region,
    unsigned char* out_region, pdc_state* state)``; a kernel of its own gets its region
    twice.

    Raises ``TypeError`` naming the field when a dtype's layout cannot be expressed as
    a C struct, and ``ValueError`` for a malformed body.
    """
    if isinstance(body, str):
        body = CudaRingBody(body)
    if wiring is None:
        wiring = RingWiring()
    layout = RingLayout(request_dtype, reply_dtype, 1, sequenced_input=wiring.sequenced_input)
    request = c_struct(np.dtype(request_dtype), "pdc_request")
    reply = c_struct(np.dtype(reply_dtype), "pdc_reply")
    if state_dtype is None:
        state_source = "struct pdc_state { unsigned char _pdc_unused; };  // no state"
        state_arg = ""
    else:
        state_source = c_struct(np.dtype(state_dtype), "pdc_state").source
        state_arg = ", state"
    replacements = {
        "@@OFFSETS@@": _constants(),
        "@@PRELUDE@@": PRELUDE,
        "@@REQUEST_STRUCT@@": request.source,
        "@@REPLY_STRUCT@@": reply.source,
        "@@REPLY_ZERO_PADDING@@": reply.padding_zeroer,
        "@@STATE_STRUCT@@": state_source,
        "@@STATE_ARG@@": state_arg,
        "@@REQUEST_LAYOUT_CHECK@@": request.layout_check("pdc_request_layout_mismatch"),
        "@@REPLY_LAYOUT_CHECK@@": reply.layout_check("pdc_reply_layout_mismatch"),
        "@@BACKOFF_MIN_NS@@": f"{body.backoff_min_ns}u",
        "@@BACKOFF_MAX_NS@@": f"{body.backoff_max_ns}u",
        "@@MAX_BATCH@@": str(body.max_batch),
        "@@BODY@@": body.body_name,
        "@@BODY_FILENAME@@": body.filename,
        "@@IN_SCOPE@@": _SCOPES[wiring.input_scope],
        "@@OUT_SCOPE@@": _SCOPES[wiring.output_scope],
        "@@OUT_LINK@@": "1" if wiring.output_link else "0",
        "@@STAGE_PREFIX@@": _c_string(wiring.prefix),
        "@@IN_FEATURES@@": str(int(layout.features)),
        "@@IN_SEQUENCED@@": "1" if wiring.sequenced_input else "0",
        "@@IN_SLOT_SIZE@@": str(layout.in_slot_size),
        "@@IN_SEQUENCE_OFFSET@@": str(layout.in_sequence_offset or 0),
    }
    text = ring_template()
    for marker, value in replacements.items():
        text = text.replace(marker, value)
    head, marker, tail = text.partition("@@USER_SOURCE@@")
    if not marker:
        raise RuntimeError("the ring kernel template has no @@USER_SOURCE@@ marker")
    user = body.source if body.source.endswith("\n") else body.source + "\n"
    text = head + user + tail
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if line == _TEMPLATE_LINE_MARKER:
            lines[number - 1] = f'#line {number + 1} "pdc_ring_kernel.cu"'
            break
    else:
        raise RuntimeError("the ring kernel template has no #line marker after the user source")
    return "\n".join(lines)


def compile_ring_kernel_ptx(
    body: CudaRingBody | str,
    request_dtype: npt.DTypeLike,
    reply_dtype: npt.DTypeLike,
    state_dtype: npt.DTypeLike | None = None,
    *,
    wiring: RingWiring | None = None,
    arch: str = DEFAULT_ARCH,
    options: tuple[str, ...] = ("-std=c++17",),
) -> str:
    """Render and compile the resident kernel to PTX with NVRTC; no GPU or driver needed.

    Raises :class:`~pdc_cuda.CudaCompileError` (with NVRTC's log, line numbers of the
    body's own file) and :class:`~pdc_cuda.NvrtcUnavailable`.
    """
    source = render_ring_kernel(body, request_dtype, reply_dtype, state_dtype, wiring)
    return compile_to_ptx(
        source,
        options=options,
        arch=arch,
        filename="pdc_ring_kernel.cu",
        what="the resident ring kernel",
    )


def describe_dtype(dtype: np.dtype[Any]) -> str:
    """The C struct a dtype becomes (what a body author writes against)."""
    return c_struct(dtype, "record").source
