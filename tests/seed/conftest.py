"""Fixtures of the PyDotCompute-layer tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import pdc_core._memory_pool


@pytest.fixture
def fresh_pool() -> Iterator[Any]:
    """PyDotCompute's ``core.memory_pool`` path over a fresh process-wide pool: both
    pdc's pool and the path's view are made anew, and put back afterwards."""
    from pdc_core.core import memory_pool as path

    saved = path.MemoryPool._instance, pdc_core._memory_pool._default_pool
    path.MemoryPool._instance = None
    pdc_core._memory_pool._default_pool = None
    try:
        yield path
    finally:
        path.MemoryPool._instance, pdc_core._memory_pool._default_pool = saved
