"""The plugin registers everywhere and explains precisely why it cannot run."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import BENCHMARK, cuda_availability
from pdc_cuda import CudaBackend, CudaProbe, diagnose
from pdc_cuda._availability import format_cuda_version

import pdc_core
from pdc_core import BackendUnavailable


def test_plugin_is_registered_and_loads():
    plugins = {info.name: info for info in pdc_core.list_plugins()}
    assert "cuda" in plugins
    assert plugins["cuda"].error is None
    assert plugins["cuda"].backends == ["cuda"]
    assert plugins["cuda"].hooks == ["pdc_register_backends", "pdc_register_benchmarks"]
    assert plugins["cuda"].benchmarks == ["cuda"]  # pdc bench --backend cuda's own paths
    info = {i.name: i for i in pdc_core.available_backends()}["cuda"]
    assert info.distribution == "pdc-cuda"
    assert info.priority > {i.name: i for i in pdc_core.available_backends()}["cpu"].priority


def test_availability_never_raises_and_is_precise():
    availability = CudaBackend.availability()
    assert isinstance(availability, pdc_core.backend.Availability)
    assert availability.reason
    if not availability.available:
        assert availability.reason.startswith(
            (
                "CuPy is not installed",
                "CuPy is installed more than once",
                "CuPy is installed but failed",
                "no CUDA driver",
                "CUDA driver found but",
                "the CUDA driver supports",
            )
        ), availability.reason


def test_asking_for_cuda_names_the_reason():
    availability = cuda_availability()
    if availability.available:
        pytest.skip("a CUDA GPU is available here, so get_backend('cuda') succeeds")
    for name in ("cuda", "cuda:1"):
        with pytest.raises(BackendUnavailable) as caught:
            pdc_core.get_backend(name)
        message = str(caught.value)
        assert availability.reason in message
        assert "pdc-cuda" in message
        assert "cpu (pdc-cpu) - available" in message
    # An unavailable cuda never becomes the default.
    assert pdc_core.get_backend().name != "cuda"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_importing_the_plugin_does_not_import_cupy():
    result = _run(
        """
        import sys
        import pdc_cuda
        import pdc_core
        pdc_core.list_plugins()
        assert "cupy" not in sys.modules, "pdc_cuda imported cupy eagerly"
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_without_cupy_the_backend_says_pip_install_pdc_cuda():
    # ``sys.modules["cupy"] = None`` makes ``import cupy`` fail exactly as when CuPy is
    # not installed, whether or not it is installed in this environment.
    result = _run(
        """
        import sys
        sys.modules["cupy"] = None
        import pdc_core
        from pdc_cuda import CudaBackend
        print(CudaBackend.availability().reason)
        try:
            pdc_core.get_backend("cuda")
        except pdc_core.BackendUnavailable as exc:
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "CuPy is not installed: pip install pdc-cuda"
    assert "the cuda backend (from pdc-cuda) is not available here" in result.stdout
    assert "CuPy is not installed: pip install pdc-cuda" in lines[1]


class _Status(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"cudaError {status}")
        self.status = status


TWO_CUPYS = "CuPy is installed more than once (cupy-cuda12x 14.2.0, cupy-cuda13x 14.2.0)"


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (
            CudaProbe(cupy_error=ModuleNotFoundError("No module named 'cupy'", name="cupy")),
            "CuPy is not installed: pip install pdc-cuda",
        ),
        (
            CudaProbe(cupy_distributions=(("cupy-cuda12x", "14.2.0"), ("cupy-cuda13x", "14.2.0"))),
            TWO_CUPYS,
        ),
        (
            CudaProbe(cupy_error=ImportError("libnvrtc.so.12: cannot open shared object file")),
            "CuPy is installed but failed to import (ImportError: libnvrtc.so.12",
        ),
        (
            CudaProbe(cupy_version="14.2.0", driver_found=False),
            "no CUDA driver (libcuda.so not found)",
        ),
        (
            CudaProbe(cupy_version="14.2.0", driver_found=True, driver_version=0),
            "no CUDA driver (libcuda.so not found)",
        ),
        (
            CudaProbe(
                cupy_version="14.2.0",
                driver_found=True,
                driver_version=12040,
                runtime_version=12090,
                error_status=100,
                error_text="cudaErrorNoDevice",
            ),
            "CUDA driver found but no device",
        ),
        (
            CudaProbe(
                cupy_version="14.2.0",
                driver_found=True,
                driver_version=12040,
                runtime_version=12090,
                device_count=0,
            ),
            "CUDA driver found but no device",
        ),
        (
            CudaProbe(
                cupy_version="14.2.0",
                driver_found=True,
                driver_version=11080,
                runtime_version=12090,
                error_status=35,
                error_text="insufficient",
            ),
            "the CUDA driver supports CUDA 11.8 but CuPy 14.2.0 needs CUDA 12.9: update the "
            "NVIDIA driver",
        ),
        (
            CudaProbe(
                cupy_version="14.2.0",
                driver_found=True,
                driver_version=12040,
                runtime_version=12090,
                error_status=999,
                error_text="cudaErrorUnknown: x",
            ),
            "CUDA driver found but it failed to enumerate devices: cudaErrorUnknown: x",
        ),
    ],
)
def test_diagnose_every_branch(facts, expected, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    availability = diagnose(facts)
    assert not availability.available
    assert availability.reason.startswith(expected), availability.reason


def test_diagnose_mentions_hidden_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    facts = CudaProbe(
        cupy_version="14.2.0", driver_found=True, driver_version=12040, device_count=0
    )
    assert diagnose(facts).reason == (
        "CUDA driver found but no device (CUDA_VISIBLE_DEVICES='' hides devices)"
    )


def test_diagnose_available():
    facts = CudaProbe(
        cupy_version="14.2.0",
        driver_found=True,
        driver_version=12080,
        runtime_version=12090,
        device_count=2,
    )
    availability = diagnose(facts)
    assert availability.available
    assert availability.reason == "2 CUDA device(s), driver CUDA 12.8, CuPy 14.2.0"


@pytest.mark.parametrize(
    ("version", "text"),
    [(12040, "12.4"), (13000, "13.0"), (11080, "11.8"), (0, "unknown"), (None, "unknown")],
)
def test_format_cuda_version(version, text):
    assert format_cuda_version(version) == text


def test_the_benchmark_refuses_without_a_gpu():
    availability = cuda_availability()
    if availability.available:
        pytest.skip("a CUDA GPU is available here: the benchmark would run")
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert f"the cuda backend is unavailable here: {availability.reason}" in result.stderr


def test_probe_asks_the_cheap_questions_before_importing_cupy(monkeypatch):
    """No driver library: the verdict comes without importing CuPy (a None entry in
    sys.modules makes any import of it fail, which the probe would report instead)."""
    from pdc_cuda import _availability

    _installed(monkeypatch, {"cupy-cuda12x": "14.2.0"})
    monkeypatch.setattr(_availability, "_driver_loadable", lambda: False)
    monkeypatch.setattr(_availability, "_cupy_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "cupy", None)
    facts = _availability.probe()
    assert facts == CudaProbe(driver_found=False)
    assert diagnose(facts).reason == "no CUDA driver (libcuda.so not found)"
    monkeypatch.setattr(_availability, "_cupy_installed", lambda: False)
    assert diagnose(_availability.probe()).reason == "CuPy is not installed: pip install pdc-cuda"


def _installed(monkeypatch, distributions: dict[str, str]) -> None:
    """Make ``importlib.metadata`` report exactly these distributions (name: version)."""

    def version(name: str) -> str:
        if name in distributions:
            return distributions[name]
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)


def test_two_cupy_distributions_are_named_before_cupy_is_imported(monkeypatch):
    """``pip install pdc-cuda`` where cupy-cuda13x is installed adds cupy-cuda12x, which
    overwrites the same cupy package: the reason names both and how to keep one, and
    comes without importing that mixed cupy (a None entry in sys.modules makes any
    import of it fail, which the probe would report instead)."""
    from pdc_cuda import _availability

    _installed(monkeypatch, {"cupy-cuda13x": "14.2.0", "cupy-cuda12x": "14.2.0"})
    monkeypatch.setattr(_availability, "_cupy_installed", lambda: True)
    monkeypatch.setattr(_availability, "_driver_loadable", lambda: True)
    monkeypatch.setitem(sys.modules, "cupy", None)
    facts = _availability.probe()
    assert facts == CudaProbe(
        cupy_distributions=(("cupy-cuda12x", "14.2.0"), ("cupy-cuda13x", "14.2.0"))
    )
    reason = (
        f"{TWO_CUPYS}, and each writes the same cupy package: pip uninstall -y cupy-cuda12x "
        "cupy-cuda13x, then pip install the one for this machine (cupy-cuda12x for CUDA 12, "
        "cupy-cuda13x for CUDA 13)"
    )
    assert diagnose(facts).reason == reason
    with pytest.raises(BackendUnavailable) as caught:
        CudaBackend()
    assert str(caught.value) == f"the cuda backend (from pdc-cuda) is not available here: {reason}"


@pytest.mark.parametrize("name", ["cupy-cuda12x", "cupy-cuda13x", "cupy"])
def test_one_cupy_distribution_of_any_name_is_not_a_problem(monkeypatch, name):
    from pdc_cuda import _availability

    _installed(monkeypatch, {name: "14.2.0", "numpy": "2.3.0"})
    monkeypatch.setattr(_availability, "_cupy_installed", lambda: True)
    monkeypatch.setattr(_availability, "_driver_loadable", lambda: False)
    assert _availability.probe() == CudaProbe(driver_found=False)


def test_making_the_backend_without_a_driver_names_the_same_reason(monkeypatch):
    """``CudaBackend()`` (any placement) where no driver loads raises what
    ``get_backend("cuda")`` raises -- BackendUnavailable with the probe's reason --
    before CuPy is ever asked (it would say "CUDA driver version is insufficient")."""
    from pdc_cuda import _availability

    _installed(monkeypatch, {"cupy-cuda12x": "14.2.0"})
    monkeypatch.setattr(_availability, "_cupy_installed", lambda: True)
    monkeypatch.setattr(_availability, "_driver_loadable", lambda: False)
    reason = _availability.availability().reason
    assert reason == "no CUDA driver (libcuda.so not found)"
    for options in ({}, {"context": "own"}, {"context": "green"}, {"context": "shared"}):
        with pytest.raises(BackendUnavailable) as caught:
            CudaBackend(**options)
        expected = f"the cuda backend (from pdc-cuda) is not available here: {reason}"
        assert str(caught.value) == expected


@pytest.mark.parametrize("device", [True, 0.0, "0", None])
def test_the_device_index_follows_the_integer_rule(device):
    """Checked before anything else: never ``cuda:True``."""
    from pdc_cuda.testing import HostCudaBackend

    for backend in (CudaBackend, HostCudaBackend):
        with pytest.raises(TypeError, match=f"device must be a device index .*{device!r}"):
            backend(device=device)
    assert HostCudaBackend(device=np.int32(2)).qualified_name == "cuda:2"


@pytest.mark.parametrize("name", ["max_threads_per_block", "multiprocessors"])
def test_the_host_build_s_device_limits_follow_the_integer_rule(name):
    from pdc_cuda.testing import HostCudaBackend

    with pytest.raises(TypeError, match=f"{name} must be an int, got bool True"):
        HostCudaBackend(**{name: True})
    with pytest.raises(ValueError, match=f"{name} must be at least 1, not 0"):
        HostCudaBackend(**{name: 0})
    assert HostCudaBackend(**{name: np.int64(8)}).properties.to_device_info("cuda")
