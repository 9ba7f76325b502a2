"""Fixtures of the GPU tests (``test_cuda_gpu*.py``): the backend, and a watchdog; and
of the host-build tests (``test_cuda_host_*.py``): their kernels built up front.

A GPU test module marks itself ``pytest.mark.usefixtures("gpu_watchdog")``.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Iterator
from typing import Any

import pytest
from cuda_test_support import real_stderr, skip_if_a_kernel_is_resident

import pdc_core

#: The host-build test modules, whose kernels ``host_builds`` builds up front.
HOST_MODULES = ("test_cuda_host_kernel", "test_cuda_host_tsan", "test_cuda_host_mesh")


@pytest.fixture
def gpu_watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    """End the run, with every thread's stack, if a test hangs on the device
    (``PDC_CUDA_TEST_TIMEOUT`` seconds, 120 by default)."""
    timeout = float(os.environ.get("PDC_CUDA_TEST_TIMEOUT", "120"))
    faulthandler.dump_traceback_later(timeout, exit=True, file=real_stderr(request.config))
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def cuda() -> Any:
    """The cuda backend, device 0; a test that would start beside a kernel an earlier
    test left resident is skipped with that reason (see skip_if_a_kernel_is_resident)."""
    return skip_if_a_kernel_is_resident(pdc_core.get_backend("cuda"))


@pytest.fixture(scope="session")
def host_builds(request: pytest.FixtureRequest) -> frozenset[str]:
    """The keys of every host build the session's host-build modules need, built before
    the first of their tests on every core (``cuda_host_plan.py``): with an empty cache,
    as in CI, building them one by one as the tests reach them took most of their time.
    Only the plans of modules with a selected test are built."""
    from pdc_cuda.testing import HostCudaBackend, prebuild

    if not HostCudaBackend.availability().available:
        return frozenset()  # the modules skip, saying why
    from cuda_host_plan import PLANS
    from pdc_cuda.testing._tsan import build_driver

    selected = {getattr(item.module, "__name__", "") for item in request.session.items
                if isinstance(item, pytest.Function)}  # fmt: skip
    modules = [name for name in HOST_MODULES if name in selected]
    builds = [build for name in modules for build in PLANS[name]()]
    also = [build_driver] if "test_cuda_host_tsan" in modules else []
    return frozenset(build.key for build in prebuild(builds, also=also))
