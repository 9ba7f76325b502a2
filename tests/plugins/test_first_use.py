"""Choosing the default backend probes best first and imports no vendor library it skips.

The time it costs is a benchmark (``benchmarks/first_use.py``); what is tested here is
the behaviour behind it: in a fresh interpreter, ``get_backend()`` on a machine where
only cpu can run leaves CuPy, MLX and Ray out of ``sys.modules``, and the GPU plugins'
backend modules too (they register lazily).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

import pdc_core
from pdc_core import available_backends
from pdc_core.backend import Availability, Backend

CHILD = """
import json, sys
import pdc_core
name = pdc_core.get_backend().name
heavy = ("cupy", "mlx", "ray", "pdc_cuda._backend", "pdc_metal._backend")
loaded = sorted(m for m in heavy if m in sys.modules)
print(json.dumps({"backend": name, "loaded": loaded}))
"""


def _cuda_driver_here() -> bool:
    from pdc_cuda._availability import _driver_loadable

    return _driver_loadable()


def test_default_backend_imports_no_vendor_library() -> None:
    pytest.importorskip("pdc_cuda")
    pytest.importorskip("pdc_metal")
    if _cuda_driver_here():
        pytest.skip("this machine has a CUDA driver: the cuda backend may rightly be chosen")
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        pytest.skip("Apple silicon: the metal backend may rightly be chosen")
    env = {k: v for k, v in os.environ.items() if k not in ("PDC_PLUGINS", "PDC_BACKEND")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"backend": "cpu", "loaded": []}


def test_default_stops_probing_at_the_first_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend ranked below the chosen one is never asked whether it can run."""
    asked: list[str] = []

    def ranked(name: str, priority: int, available: bool) -> type[Backend]:
        def availability(cls: type[Backend]) -> Availability:
            asked.append(cls.name)
            return Availability.yes("here") if available else Availability.no("not here")

        attributes = {
            "name": name,
            "distribution": f"pdc-{name}",
            "priority": priority,
            "availability": classmethod(availability),
        }
        return type(f"{name.title()}Backend", (Backend,), attributes)

    from pdc_core._plugins import _loader

    fake = {
        backend.name: _loader.RegisteredBackend(backend)
        for backend in (
            ranked("best", 300, False),
            ranked("good", 200, True),
            ranked("worse", 150, True),
        )
    }
    monkeypatch.setattr(_loader, "backend_registrations", lambda: fake)
    monkeypatch.delenv("PDC_BACKEND", raising=False)
    monkeypatch.delenv("PDC_PLUGINS", raising=False)
    pdc_core.reload_plugins()
    try:
        from pdc_core._plugins._registry import default_backend_name

        assert default_backend_name() == "good"
        assert asked == ["best", "good"]
        assert [info.name for info in available_backends()] == ["good", "worse", "best"]
    finally:
        pdc_core.reload_plugins()
