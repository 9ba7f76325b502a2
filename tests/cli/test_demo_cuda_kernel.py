"""``pdc demo``'s feature kernel: its CUDA body compiles, and computes what the cpu body does.

No GPU is needed: the body is compiled to PTX with NVRTC inside pdc_cuda's resident-loop
template (skipped, with the reason, where NVRTC cannot be loaded), and the same device
function is compiled for the host with a C++ compiler to check its scores against
``numpy_scores`` (skipped where there is no host compiler). pdc-cuda's host build runs
the whole rendered ring kernel with this body on CPU threads (``pdc demo --backend cuda``
on the dry run of the GPU call) and must score the same.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from pdc_cuda import NvrtcUnavailable, compile_ring_kernel_ptx
from pdc_cuda._codegen import PRELUDE, c_struct
from pdc_cuda._nvrtc import find_nvrtc
from pdc_cuda.testing import HostCudaBackend

from pdc_core import open_persistent_kernel
from pdc_core._cli._demo import FEATURE_KERNEL, DemoConfig, numpy_scores, synthetic_stream


def _nvrtc_reason() -> str | None:
    try:
        find_nvrtc()
    except NvrtcUnavailable as exc:
        return str(exc)
    return None


NVRTC_MISSING = _nvrtc_reason()
HOST_BUILD = HostCudaBackend.availability()


def cuda_source() -> str:
    return str(FEATURE_KERNEL.body_for("cuda").source)


@pytest.mark.skipif(NVRTC_MISSING is not None, reason=f"NVRTC cannot be loaded: {NVRTC_MISSING}")
def test_demo_feature_kernel_compiles_to_ptx() -> None:
    ptx = compile_ring_kernel_ptx(
        cuda_source(), FEATURE_KERNEL.request_dtype, FEATURE_KERNEL.reply_dtype
    )
    assert ".entry pdc_ring_kernel(" in ptx


def test_demo_feature_kernel_scores_like_numpy(tmp_path: Path) -> None:
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no host C++ compiler (c++, g++ or clang++) to run the body on the host")
    request = c_struct(FEATURE_KERNEL.request_dtype, "pdc_request")
    reply = c_struct(FEATURE_KERNEL.reply_dtype, "pdc_reply")
    program = "\n".join(
        [
            "#include <math.h>",  # the host's fabsf and fmaxf stand in for CUDA's
            "#include <cstdio>",
            "#define __device__",
            PRELUDE,
            request.source,
            reply.source,
            cuda_source(),
            "int main(int argc, char** argv) {",
            '    std::FILE* in = std::fopen(argv[1], "rb");',
            '    std::FILE* out = std::fopen(argv[2], "wb");',
            "    pdc_request q; pdc_reply r = {};",
            "    while (std::fread(&q, sizeof q, 1, in) == 1) {",
            "        if (pdc_body(q, r) != 0) return 3;",
            "        std::fwrite(&r, sizeof r, 1, out);",
            "    }",
            "    std::fclose(out);",
            "    return 0;",
            "}",
        ]
    )
    (tmp_path / "body.cpp").write_text(program)
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-o", str(tmp_path / "body"), str(tmp_path / "body.cpp")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    ids, frames = next(iter(synthetic_stream(DemoConfig(messages=512, seed=11, anomaly_rate=0.02))))
    requests = np.zeros(len(ids), FEATURE_KERNEL.request_dtype)
    requests["frame_id"] = ids
    requests["samples"] = frames
    requests.tofile(tmp_path / "requests.bin")
    subprocess.run(
        [str(tmp_path / "body"), str(tmp_path / "requests.bin"), str(tmp_path / "replies.bin")],
        check=True,
        timeout=30,
    )
    replies = np.fromfile(tmp_path / "replies.bin", FEATURE_KERNEL.reply_dtype)
    assert np.array_equal(replies["frame_id"], ids)
    np.testing.assert_allclose(replies["score"], numpy_scores(frames), rtol=1e-6, atol=1e-6)


@pytest.mark.cuda_host
@pytest.mark.skipif(
    not HOST_BUILD.available, reason=f"no host build of the ring kernel: {HOST_BUILD.reason}"
)
async def test_demo_feature_kernel_scores_like_numpy_on_the_host_build() -> None:
    # fabsf and fmaxf are CUDA's math library: the host build's header takes <math.h>'s.
    ids, frames = next(iter(synthetic_stream(DemoConfig(messages=64, seed=5, anomaly_rate=0.1))))
    requests = np.zeros(len(ids), FEATURE_KERNEL.request_dtype)
    requests["frame_id"] = ids
    requests["samples"] = frames
    async with open_persistent_kernel(FEATURE_KERNEL, HostCudaBackend(), threads=4) as session:
        replies = await session.request_batch(requests)
    assert np.array_equal(replies["frame_id"], ids)
    np.testing.assert_allclose(replies["score"], numpy_scores(frames), rtol=1e-6, atol=1e-6)
