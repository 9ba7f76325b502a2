"""Helpers of the pdc-cuda tests.

Tests that need a GPU are marked ``cuda`` and skip, with the backend's own reason
("no CUDA driver (libcuda.so not found)", ...), where the backend is unavailable.
"""

from __future__ import annotations

import functools

import pytest

from pdc_core import Availability


@functools.cache
def cuda_availability() -> Availability:
    from pdc_cuda import CudaBackend

    return CudaBackend.availability()


def requires_gpu() -> pytest.MarkDecorator:
    """``skipif`` with the exact reason the cuda backend gives for being unavailable."""
    availability = cuda_availability()
    return pytest.mark.skipif(
        not availability.available,
        reason=f"needs a CUDA GPU: the cuda backend is unavailable here: {availability.reason}",
    )
