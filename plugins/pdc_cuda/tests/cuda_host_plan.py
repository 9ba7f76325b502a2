"""What the host-build test modules will compile, built up front (``conftest.py``'s
``host_builds``): every distinct kernel source, on every core, before the first test.

Each plan renders through the cuda backend's own launch path (``pdc_cuda.testing``'s
``kernel_builds`` / ``pipeline_builds``), from the kernels the tests launch. A test whose
backend compiles a source no plan has fails with that source's kernel named (see
``check_planned``): add it here. Sources a test renders on purpose to fail (NVRTC
rejects them before any host build) and the TSan positive control's edited template
are not planned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from cuda_pipeline_support import (
    ADD_ONE,
    FRAGILE,
    GATE_STATE,
    GATED,
    MINUS_THREE,
    NEGATIVE_FAILS,
    TWICE,
    abc,
    stage,
)
from cuda_test_support import COUNTING, DOUBLE, REPLY, REQUEST, STATE, padding_kernels
from pdc_cuda._kernels import compile_options
from pdc_cuda._ring_source import RingWiring, render_ring_kernel
from pdc_cuda.testing import PlannedBuild, kernel_builds, pipeline_builds
from pdc_cuda.testing._tsan import tsan_pipeline_builds, tsan_single_builds

from pdc_core import PersistentKernel, PersistentPipeline


def _kernel(name: str, body: str, capacity: int, state: Any = None) -> PersistentKernel:
    kernel = PersistentKernel(name, REQUEST, REPLY, capacity=capacity, state=state)
    return kernel.add_body("cuda", body)


def _gpu_modules() -> list[PlannedBuild]:
    """test_cuda_gpu.py and test_cuda_gpu_pipeline.py, as test_cuda_host_kernel.py runs them."""
    gate = np.zeros(1, GATE_STATE)
    builds = [
        *kernel_builds(_kernel("double", DOUBLE, 64)),
        *kernel_builds(_kernel("counting", COUNTING, 64, np.zeros(1, STATE))),
    ]
    for pipeline in (
        abc((2, 1, 3)),
        abc((3, 2, 2)),
        abc((2, 2, 2)),
        abc((4, 2, 4), FRAGILE),
        abc((8, 8, 8), GATED, gate),
        abc((4, 1, 4), GATED, gate),
        abc(),
        PersistentPipeline(stage("a", TWICE), stage("b", TWICE), stage("c", NEGATIVE_FAILS)),
    ):
        builds += pipeline_builds(pipeline)
    return builds


def _host_kernel_module() -> list[PlannedBuild]:
    """test_cuda_host_kernel.py: the GPU modules' tests and its own."""
    affine = PersistentKernel("conformance_affine", np.float32, np.float32, capacity=8)
    affine.add_body(
        "cuda",
        "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) {"
        " r.value = 2.0f * q.value + 1.0f; return 0; }",
    )
    failing = PersistentKernel("conformance_failing", np.float32, np.float32, capacity=8)
    failing.add_body(
        "cuda", "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) { return 1; }"
    )
    wrong = RingWiring(input_scope="device", sequenced_input=True)
    narrow = render_ring_kernel(DOUBLE, REQUEST, REPLY, None, wrong)
    return [
        *_gpu_modules(),
        *kernel_builds(affine),
        *kernel_builds(failing),
        *kernel_builds(_kernel("double", DOUBLE, 16)),
        *pipeline_builds(PersistentPipeline(stage("a", ADD_ONE, 3), stage("c", MINUS_THREE, 2))),
        PlannedBuild(narrow, compile_options(()), what="a scope narrower than its memory"),
        *(build for kernel in padding_kernels() for build in kernel_builds(kernel)),
    ]


def _host_tsan_module() -> list[PlannedBuild]:
    """test_cuda_host_tsan.py (its positive control builds an edited template itself)."""
    return [
        *tsan_single_builds(TWICE, threads=1),
        *tsan_single_builds(FRAGILE, threads=1),
        *tsan_pipeline_builds(abc(), threads=1),
        *tsan_pipeline_builds(abc(middle=FRAGILE), threads=1),
    ]


def _host_mesh_module() -> list[PlannedBuild]:
    """test_cuda_host_mesh.py: test_cuda_gpu_mesh.py's kernel (one build for every device)."""
    from test_cuda_gpu_mesh import mesh_kernel

    return kernel_builds(mesh_kernel())


#: Module name -> its plan.
PLANS: dict[str, Callable[[], list[PlannedBuild]]] = {
    "test_cuda_host_kernel": _host_kernel_module,
    "test_cuda_host_tsan": _host_tsan_module,
    "test_cuda_host_mesh": _host_mesh_module,
}


def check_planned(backends: Any, planned: frozenset[str]) -> None:
    """Fail if one of ``backends`` (HostCudaBackend) compiled a source no plan has."""
    missing = [
        build for backend in backends for build in backend.builds if build.key not in planned
    ]
    if missing:
        first = missing[0].source
        pytest.fail(
            f"{len(missing)} host build(s) not in cuda_host_plan.PLANS (each is compiled on "
            "one core while the test waits; add it to the plan of its module). The first "
            "source's body:\n" + first[first.find('#line 1 "') :][:800]
        )
