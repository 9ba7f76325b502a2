"""The resident kernel's CUDA C, rendered and compiled to PTX without a GPU.

The NVRTC tests need an NVRTC library and a Python binding for it (CuPy's, or
cuda-bindings'); where none loads they skip with the exact reason
(``pip install 'pdc-cuda[nvrtc]'`` provides it). No driver or GPU is ever needed.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
import cuda_test_support
from pdc_cuda import (
    CudaCompileError,
    CudaRingBody,
    compile_ring_kernel_ptx,
    compile_to_ptx,
    render_ring_kernel,
)
from pdc_cuda._codegen import PRELUDE, c_struct
from pdc_cuda._nvrtc import cccl_include_options, find_nvrtc, min_compute_capability
from pdc_cuda._ring_source import RingWiring

from pdc_core.backend import ERROR_MESSAGE_SIZE, RING_MAGIC, ErrorCode, Offset, StopMode

REQUEST = np.dtype([("id", "<u8"), ("x", "<f4"), ("tag", "u1")], align=True)
REPLY = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)
ECHO = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    reply.id = request.id;
    reply.y = 2.0 * request.x;
    return request.tag == 255 ? 256 + request.tag : 0;
}
"""


needs_nvrtc = cuda_test_support.needs_nvrtc()


# -- rendering (pure Python) ---------------------------------------------------------------


def test_every_marker_is_filled_and_constants_come_from_the_protocol():
    source = render_ring_kernel(ECHO, REQUEST, REPLY)
    assert "@@" not in source
    for offset in Offset:
        assert f"#define PDC_OFF_{offset.name} {int(offset)}ull" in source
    for mode in StopMode:
        assert f"#define PDC_STOP_{mode.name} {int(mode)}u" in source
    assert f"#define PDC_ERROR_PROTOCOL {int(ErrorCode.PROTOCOL)}u" in source
    assert f"#define PDC_RING_MAGIC {RING_MAGIC}u" in source
    assert f"#define PDC_ERROR_MESSAGE_SIZE {ERROR_MESSAGE_SIZE}u" in source
    assert "struct pdc_request {" in source
    assert "struct pdc_reply {" in source
    assert 'extern "C" __global__' in source
    assert "pdc_body(request, reply)" in source


def test_line_directives_point_at_the_body_and_the_template():
    source = render_ring_kernel(CudaRingBody(ECHO, filename="echo.cu"), REQUEST, REPLY)
    lines = source.split("\n")
    body_start = lines.index('#line 1 "echo.cu"')
    assert (
        lines[body_start + 1 : body_start + 1 + len(ECHO.split("\n")) - 1] == ECHO.split("\n")[:-1]
    )
    (after,) = [i for i, line in enumerate(lines) if line.endswith('"pdc_ring_kernel.cu"')]
    number = int(re.match(r"#line (\d+) ", lines[after]).group(1))
    assert number == after + 2  # the directive names the number of the line after it


def test_state_adds_a_third_argument():
    state = np.dtype([("count", "<u8")])
    source = render_ring_kernel(
        ECHO.replace("pdc_reply& reply)", "pdc_reply& reply, pdc_state* state)"),
        REQUEST,
        REPLY,
        state,
    )
    assert "struct pdc_state {" in source
    assert "pdc_body(request, reply, state)" in source


def test_body_options_reach_the_source():
    body = CudaRingBody(
        ECHO.replace("pdc_body", "echo"),
        body_name="echo",
        max_batch=7,
        backoff_min_ns=0,
        backoff_max_ns=1024,
    )
    source = render_ring_kernel(body, REQUEST, REPLY)
    assert "#define PDC_MAX_BATCH 7ull" in source
    assert "#define PDC_BACKOFF_MIN_NS 0u" in source
    assert "#define PDC_BACKOFF_MAX_NS 1024u" in source
    assert "echo(request, reply)" in source


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"source": ""}, "needs CUDA C source"),
        ({"source": "int x;"}, "does not mention its body function 'pdc_body'"),
        ({"source": ECHO, "body_name": "not valid"}, "C identifier"),
        ({"source": ECHO, "threads": 0}, "threads must be an int in 1..1024"),
        ({"source": ECHO, "threads": 2048}, "threads must be an int in 1..1024"),
        ({"source": ECHO, "max_batch": 0}, "max_batch must be a positive int"),
        ({"source": ECHO, "backoff_min_ns": 500, "backoff_max_ns": 100}, "larger than"),
        ({"source": ECHO, "backoff_max_ns": -1}, "backoff_max_ns must be an int"),
        ({"source": ECHO, "filename": 'a"b.cu'}, "#line directive"),
    ],
)
def test_bad_bodies_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CudaRingBody(**kwargs)


@pytest.mark.parametrize("name", ["threads", "max_batch", "backoff_min_ns", "backoff_max_ns"])
@pytest.mark.parametrize("value", [True, 32.0, "32", None])
def test_a_body_s_integers_follow_the_integer_rule(name, value):
    """A bool, a float (even a whole one) or a string is a TypeError naming the setting
    and the value as given; a NumPy integer is an int."""
    with pytest.raises(TypeError, match=f"{name} must be .*, got {type(value).__name__} {value!r}"):
        CudaRingBody(ECHO, **{name: value})
    body = CudaRingBody(ECHO, **{name: np.int64(64)})
    assert type(getattr(body, name)) is int
    assert getattr(body, name) == 64


@pytest.mark.parametrize(
    ("dtype", "match"),
    [
        (np.dtype([("a", "u1"), ("b", "<u8")]), "at byte 1, not a multiple of its 8-byte"),
        (np.dtype([("a", "<u8"), ("b", "u1")]).newbyteorder(">"), "big-endian"),
        (np.dtype([("class", "<u4")]), "C\\+\\+ keyword"),
        (np.dtype([("_pdc_x", "<u4")]), "reserved"),
        (np.dtype([("u", "U4")]), "no CUDA C equivalent"),
        (
            np.dtype({"names": ["a"], "formats": ["<u4"], "offsets": [0], "itemsize": 6}),
            "not a multiple of its 4-byte alignment",
        ),
    ],
)
def test_layouts_c_cannot_express_are_refused(dtype, match):
    with pytest.raises(TypeError, match=match):
        render_ring_kernel(ECHO, dtype, REPLY)


# -- the C layout matches NumPy's (checked with the host C++ compiler) ----------------------

LAYOUTS = [
    REQUEST,
    REPLY,
    np.dtype("<f8"),
    np.dtype(
        [
            ("id", "<u8"),
            ("value", "<f4"),
            ("flag", "u1"),
            ("name", "S5"),
            ("v", "<f8", (3,)),
            ("p", np.dtype([("x", "<f4"), ("y", "<i2")], align=True)),
            ("c", "<c8"),
            ("z", "<c16"),
            ("h", "<f2"),
            ("raw", "V3"),
        ],
        align=True,
    ),
]


@pytest.mark.parametrize("dtype", LAYOUTS, ids=lambda d: str(d)[:40])
def test_generated_structs_have_numpys_layout(dtype, tmp_path):
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no host C++ compiler (c++, g++ or clang++) to check struct layouts")
    struct = c_struct(dtype, "rec")
    prints = "\n".join(
        f'    std::printf("{name} %zu\\n", offsetof(rec, {name}));' for name, _ in struct.offsets
    )
    program = (
        "#include <cstddef>\n#include <cstdio>\n" + PRELUDE + struct.source + "\nint main() {\n"
        '    std::printf("sizeof %zu\\n", sizeof(rec));\n' + prints + "\n}\n"
    )
    (tmp_path / "layout.cpp").write_text(program)
    subprocess.run(
        [compiler, "-std=c++17", "-o", str(tmp_path / "layout"), str(tmp_path / "layout.cpp")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    output = subprocess.run(
        [str(tmp_path / "layout")], check=True, capture_output=True, text=True, timeout=30
    ).stdout.split("\n")
    assert output[0] == f"sizeof {dtype.itemsize}"
    expected = [f"{name} {offset}" for name, offset in struct.offsets]
    assert output[1 : 1 + len(expected)] == expected


def _field_bytes(dtype: np.dtype, base: int = 0, into: set[int] | None = None) -> set[int]:
    """The byte offsets some field of ``dtype`` covers (nested fields included)."""
    into = set() if into is None else into
    if dtype.names is None:
        into.update(range(base, base + dtype.itemsize))
        return into
    for name in dtype.names:
        field, offset = dtype.fields[name][:2]
        inner, count = field, 1
        if field.subdtype is not None:
            inner, shape = field.subdtype
            count = int(np.prod(shape))
        for index in range(count):
            _field_bytes(inner, base + offset + index * inner.itemsize, into)
    return into


PADDED = np.dtype(
    [
        ("flag", "u1"),
        ("id", "<u8"),
        ("p", np.dtype([("x", "<f4"), ("t", "u1")], align=True), (2,)),
        ("q", np.dtype([("inner", np.dtype([("a", "<u2"), ("b", "<u8")], align=True))])),
        ("tag", "u1"),
    ],
    align=True,
)


@pytest.mark.parametrize("dtype", [*LAYOUTS, PADDED], ids=lambda d: str(d)[:40])
def test_the_padding_zeroer_clears_exactly_the_padding(dtype, tmp_path):
    """``pdc_zero_padding`` on a record full of 0xAB zeroes every byte no field covers
    (nested structs and arrays of them included) and leaves every field's byte alone."""
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no host C++ compiler (c++, g++ or clang++) to run the padding zeroer")
    struct = c_struct(dtype, "rec")
    program = (
        "#include <cstdio>\n#include <cstring>\n#define __device__\n"
        "#define __forceinline__ inline\n" + PRELUDE + struct.source + "\n"
        + struct.padding_zeroer + "\nint main() {\n    static rec r;\n"
        "    std::memset(&r, 0xAB, sizeof r);\n    pdc_zero_padding(r);\n"
        "    const unsigned char* b = reinterpret_cast<const unsigned char*>(&r);\n"
        '    for (unsigned i = 0; i < sizeof r; ++i) std::printf("%d ", b[i] ? 1 : 0);\n}\n'
    )  # fmt: skip
    (tmp_path / "zero.cpp").write_text(program)
    subprocess.run(
        [compiler, "-std=c++17", "-o", str(tmp_path / "zero"), str(tmp_path / "zero.cpp")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    output = subprocess.run(
        [str(tmp_path / "zero")], check=True, capture_output=True, text=True, timeout=30
    ).stdout.split()
    covered = _field_bytes(dtype)
    assert output == ["1" if byte in covered else "0" for byte in range(dtype.itemsize)]
    assert struct.has_padding == (len(covered) < dtype.itemsize)


@needs_nvrtc
def test_zeroing_padding_costs_nothing_where_a_reply_has_none():
    """For a reply without padding the zeroing is an empty inline function: the PTX is
    the PTX of the kernel without the call, instruction for instruction. With padding
    it adds the stores of those bytes only."""
    call = "            pdc_zero_padding(reply);\n"
    for reply, padded in (
        (REPLY, False),
        (np.dtype([("id", "<u8"), ("t", "u1")], align=True), True),
    ):
        body = ECHO.replace("reply.y = 2.0 * request.x;", "") if padded else ECHO
        if padded:
            body = body.replace("reply.id = request.id;", "reply.id = request.id; reply.t = 1;")
        source = render_ring_kernel(body, REQUEST, reply)
        assert source.count(call) == 1
        with_zeroing = compile_to_ptx(source, filename="pdc_ring_kernel.cu")
        without = compile_to_ptx(source.replace(call, ""), filename="pdc_ring_kernel.cu")
        assert ".entry pdc_ring_kernel(" in with_zeroing
        if padded:
            assert with_zeroing != without
        else:
            assert with_zeroing == without


#: A field ``a`` holding ``b`` beside a field ``a_b``: both paths are ``<name>_a_b``.
COLLIDING = np.dtype(
    [
        ("a", np.dtype([("b", np.dtype([("v", "<u4")]))])),
        ("a_b", np.dtype([("w", "<f4"), ("t", "u1")], align=True)),
        ("a_b_2", np.dtype([("u", "<u2")])),
    ],
    align=True,
)


def test_nested_structs_get_distinct_names():
    struct = c_struct(COLLIDING, "pdc_reply")
    names = re.findall(r"^struct (\w+) \{", struct.source, flags=re.MULTILINE)
    assert len(names) == len(set(names)) == 5
    assert "    pdc_reply_a_b b;" in struct.source  # the first path keeps its name
    assert "    pdc_reply_a_b_2 a_b;" in struct.source  # the later one takes a suffix
    assert "    pdc_reply_a_b_2_2 a_b_2;" in struct.source  # and so on, never a clash


@needs_nvrtc
def test_a_record_whose_nested_paths_collide_compiles():
    body = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    reply.a.b.v = request.a.b.v + 1u;
    reply.a_b.w = 2.0f * request.a_b.w;
    reply.a_b.t = request.a_b.t;
    reply.a_b_2.u = request.a_b_2.u;
    return 0;
}
"""
    ptx = compile_ring_kernel_ptx(body, COLLIDING, COLLIDING)
    assert ".entry pdc_ring_kernel(" in ptx


# -- NVRTC: the template and a body compile to PTX, with the memory orders we need ----------


@needs_nvrtc
def test_ring_kernel_compiles_to_ptx_with_system_scope_ordering():
    ptx = compile_ring_kernel_ptx(ECHO, REQUEST, REPLY)
    assert ".entry pdc_ring_kernel(" in ptx
    assert "ld.acquire.sys" in ptx  # polling IN_HEAD / OUT_TAIL
    assert "st.release.sys" in ptx  # publishing OUT_HEAD, IN_TAIL, flags
    # One fence: the drain re-check's acquire (ring-protocol.md section 5); the block's
    # threads are ordered by the barriers and thread 0's acquire/release, not by fences.
    assert re.findall(r"\bfence\.[a-z_.]+", ptx) == ["fence.acq_rel.sys"]
    assert "membar" not in ptx
    assert "nanosleep" in ptx  # idle back-off
    assert "bar.sync" in ptx  # the block's barriers
    # No read-modify-write on the mapped region (only the block-local shared CAS).
    assert not re.search(r"\batom\.(global|sys)", ptx)
    assert not re.search(r"\batom\.[a-z.]*sys", ptx)


@needs_nvrtc
def test_ring_kernel_with_state_compiles():
    body = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply, pdc_state* state) {
    unsigned long long seen = atomicAdd(&state->count, 1ull);
    reply.id = request.id;
    reply.y = static_cast<double>(seen);
    return 0;
}
"""
    ptx = compile_ring_kernel_ptx(body, REQUEST, REPLY, np.dtype([("count", "<u8")]))
    assert "atom.global.add.u64" in ptx  # the body's own atomic on device memory


@needs_nvrtc
@pytest.mark.parametrize("arch", ["oldest", "compute_80", "compute_90"])
def test_every_supported_architecture(arch):
    if arch == "oldest":  # 7.0 with CUDA 12's NVRTC, 7.5 with CUDA 13's
        major, minor = min_compute_capability(find_nvrtc().version)
        arch = f"compute_{major}{minor}"
    assert ".entry pdc_ring_kernel(" in compile_ring_kernel_ptx(ECHO, REQUEST, REPLY, arch=arch)


@needs_nvrtc
def test_a_body_that_does_not_compile_reports_its_own_lines():
    broken = (
        "__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {\n"
        "    reply.missing = 1;\n    return 0;\n}\n"
    )
    with pytest.raises(CudaCompileError) as caught:
        compile_ring_kernel_ptx(CudaRingBody(broken, filename="mine.cu"), REQUEST, REPLY)
    error = caught.value
    assert 'mine.cu(2): error: class "pdc_reply" has no member "missing"' in error.log
    assert "the resident ring kernel failed to compile with NVRTC" in str(error)
    assert isinstance(error, ValueError)


@needs_nvrtc
def test_plain_kernels_compile_and_errors_carry_the_log():
    ptx = compile_to_ptx('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2; }')
    assert ".entry k(" in ptx
    with pytest.raises(CudaCompileError, match="expected a"):
        compile_to_ptx('extern "C" __global__ void k() { int x = ; }')


# -- sequenced input slots (ring-protocol.md section 12) ------------------------------------


def test_the_input_layout_comes_from_the_ring_layout():
    from pdc_core.backend import RingLayout

    layout = RingLayout(REQUEST, REPLY, 1, sequenced_input=True)
    source = render_ring_kernel(ECHO, REQUEST, REPLY, wiring=RingWiring(sequenced_input=True))
    assert "#define PDC_IN_SEQUENCED 1\n" in source
    assert f"#define PDC_IN_SLOT_SIZE {layout.in_slot_size}ull\n" in source
    assert f"#define PDC_IN_SEQUENCE_OFFSET {layout.in_sequence_offset}ull\n" in source
    assert f"#define PDC_IN_FEATURES {int(layout.features)}u\n" in source
    plain = render_ring_kernel(ECHO, REQUEST, REPLY)
    assert "#define PDC_IN_SEQUENCED 0\n" in plain
    assert f"#define PDC_IN_SLOT_SIZE {REQUEST.itemsize}ull\n" in plain
    assert "#define PDC_IN_FEATURES 0u\n" in plain


@needs_nvrtc
def test_a_sequenced_ring_kernel_acquires_the_sequence_word():
    plain = compile_ring_kernel_ptx(ECHO, REQUEST, REPLY)
    sequenced = compile_ring_kernel_ptx(
        ECHO, REQUEST, REPLY, wiring=RingWiring(sequenced_input=True)
    )
    assert ".entry pdc_ring_kernel(" in sequenced
    # IN_HEAD is loaded relaxed in the sequenced poll; the sequence words are acquired
    # (by thread 0's poll, and by each thread for the rest of a run).
    assert sequenced.count("ld.relaxed.sys.b64") > plain.count("ld.relaxed.sys.b64")
    assert sequenced.count("ld.acquire.sys.b64") > plain.count("ld.acquire.sys.b64")
    assert not re.search(r"\batom\.[a-z.]*sys", sequenced)


@needs_nvrtc
@pytest.mark.parametrize("sequenced", [False, True])
@pytest.mark.parametrize("link", [False, True])
def test_every_variant_compiles_without_a_warning(sequenced, link):
    wiring = RingWiring(
        "system", "device" if link else "system", link, (0, "a") if link else None, sequenced
    )
    source = render_ring_kernel(ECHO, REQUEST, REPLY, wiring=wiring)
    options = ("-arch=compute_90", "-std=c++17", *cccl_include_options())
    ok, _, log = find_nvrtc().compile(source, "pdc_ring_kernel.cu", options)
    assert ok
    assert "warning" not in log, log


@pytest.mark.parametrize("layout", ["include", "include/cccl"], ids=["CUDA 12", "CUDA 13"])
def test_a_toolkit_s_cccl_is_found_where_its_version_keeps_it(layout, tmp_path, monkeypatch):
    """CUDA 13 moved CCCL's headers from ``include/`` to ``include/cccl/``."""
    from pdc_cuda import _nvrtc

    include = tmp_path / layout
    (include / "cuda").mkdir(parents=True)
    (include / "cuda" / "atomic").write_text("// cuda/atomic\n")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path))
    assert _nvrtc._toolkit_cccl() == [str(include)]


def test_no_nvrtc_names_the_cuda_12_and_cuda_13_installs_and_why(monkeypatch):
    """Where no binding loads NVRTC, the error says what to install for either CUDA
    major and what each binding reported (no NVRTC is needed: both are made to fail)."""
    from pdc_cuda import NvrtcUnavailable, _nvrtc

    def missing() -> _nvrtc.NvrtcCompiler:
        raise OSError("libnvrtc.so.13: cannot open shared object file")

    monkeypatch.setattr(_nvrtc, "_compiler", None)
    monkeypatch.setattr(_nvrtc, "_cupy_binding", missing)
    monkeypatch.setattr(_nvrtc, "_cuda_bindings_binding", missing)
    with pytest.raises(NvrtcUnavailable) as caught:
        find_nvrtc()
    assert str(caught.value) == (
        "NVRTC is not usable here (install it with: pip install 'pdc-cuda[nvrtc]', or with "
        "CUDA 13 pip install 'cuda-toolkit[nvrtc]==13.*'); CuPy's NVRTC binding: OSError: "
        "libnvrtc.so.13: cannot open shared object file; cuda-bindings: OSError: "
        "libnvrtc.so.13: cannot open shared object file"
    )
