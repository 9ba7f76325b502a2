"""Fixtures and skip markers shared by the metal backend's tests.

A helper module with a unique name rather than a ``conftest.py``: the core tests
import their own ``conftest`` by name, and a second module of that name would shadow
it. Async tests run under asyncio and trio through the pdc pytest plugin that the
root ``tests/conftest.py`` loads.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import pytest

import pdc_core

# Skip every metal test module, with the reason, where pdc-metal is not installed.
pytest.importorskip(
    "pdc_metal", reason="pdc-metal is not installed: pip install -e plugins/pdc_metal"
)

from pdc_metal import MetalBackend, _mlx

HAS_MLX = _mlx.probe().available
HAS_METAL = _mlx.probe().metal

needs_mlx = pytest.mark.skipif(
    not HAS_MLX, reason=f"metal backend unavailable: {_mlx.probe().reason}"
)
#: Metal-only tests: mark them ``metal`` too.
needs_metal = pytest.mark.skipif(
    not HAS_METAL,
    reason="needs an Apple-silicon Metal GPU through MLX (MLX has no Metal device here)",
)


def metal_backend() -> MetalBackend:
    """The metal backend of this machine; skips the test where MLX does not load."""
    if not HAS_MLX:
        pytest.skip(f"metal backend unavailable: {_mlx.probe().reason}")
    backend = pdc_core.get_backend("metal")
    assert isinstance(backend, MetalBackend)
    return backend


@contextlib.contextmanager
def simulated_missing_mlx(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Simulate a machine without MLX: ``import mlx`` fails, as if it were not installed."""
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "mlx", None)
        patch.setitem(sys.modules, "mlx.core", None)
        _mlx.reset_probe()
        pdc_core.reload_plugins()
        try:
            yield
        finally:
            _mlx.reset_probe()
    pdc_core.reload_plugins()
