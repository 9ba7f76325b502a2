"""The exceptions each plugin exports show their public path in tracebacks and reprs.

As for pdc_core's own faces (``test_public_api.py``): a user reading a traceback sees
``pdc_cuda.CudaCompileError``, never ``pdc_cuda._exceptions.CudaCompileError``.
"""

from __future__ import annotations

import importlib

import pytest

PLUGIN_FACES = [
    "pdc_cpu",
    "pdc_cuda",
    "pdc_cuda.testing",
    "pdc_cuda.graphs",
    "pdc_metal",
    "pdc_ray",
    "pdc_ray.testing",
]


@pytest.mark.parametrize("face", PLUGIN_FACES)
def test_exported_exceptions_live_at_a_public_path(face: str) -> None:
    module = pytest.importorskip(face)
    wrong = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue
        private = any(part.startswith("_") for part in obj.__module__.split("."))
        home = importlib.import_module(obj.__module__)
        if private or getattr(home, obj.__qualname__, None) is not obj:
            wrong.append(f"{name}: {obj.__module__}")
    assert wrong == []


def test_a_compile_error_names_pdc_cuda() -> None:
    pdc_cuda = pytest.importorskip("pdc_cuda")
    assert repr(pdc_cuda.CudaCompileError) == "<class 'pdc_cuda.CudaCompileError'>"
