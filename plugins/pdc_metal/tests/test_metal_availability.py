"""Discovery, ranking and the unavailable paths of the metal backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from metal_support import HAS_METAL, metal_backend, needs_metal, needs_mlx, simulated_missing_mlx
from pdc_metal import MetalBackend, _mlx

import pdc_core
from pdc_core import BackendUnavailable, Capability, CapabilityError, UnifiedBuffer


def _info(name: str) -> pdc_core.BackendInfo:
    return next(info for info in pdc_core.available_backends() if info.name == name)


def test_registered_through_the_entry_point() -> None:
    plugin = next(info for info in pdc_core.list_plugins() if info.name == "metal")
    assert plugin.error is None
    assert plugin.distribution == "pdc-metal"
    assert plugin.backends == ["metal"]
    assert "pdc_register_backends" in plugin.hooks


@needs_mlx
def test_mlx_cpu_device_is_reported_as_such() -> None:
    metal = metal_backend()
    if HAS_METAL:
        pytest.skip("this machine has a Metal GPU")
    info = _info("metal")
    assert info.availability.available
    assert "MLX has no Metal device here; using MLX's CPU device" in info.availability.reason
    device = metal.device_info
    assert device.kind == "cpu"
    assert device.name.startswith("MLX CPU device")
    assert device.properties["metal"] is False
    assert Capability.KERNELS not in info.capabilities
    assert metal.capabilities == info.capabilities
    assert Capability.UNIFIED_MEMORY in metal.capabilities


@needs_mlx
def test_mlx_on_cpu_ranks_below_the_cpu_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Best-available must prefer plain NumPy over MLX running on a CPU."""
    if HAS_METAL:
        pytest.skip("this machine has a Metal GPU")
    monkeypatch.delenv("PDC_BACKEND", raising=False)
    assert MetalBackend.priority < _info("cpu").priority
    assert _info("metal").priority == MetalBackend.priority == _mlx.CPU_DEVICE_PRIORITY
    assert pdc_core.get_backend().name == "cpu"
    names = [info.name for info in pdc_core.available_backends()]
    assert names.index("cpu") < names.index("metal")


@needs_mlx
def test_chosen_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDC_BACKEND", "metal")
    assert pdc_core.get_backend().name == "metal"
    assert pdc_core.get_backend("metal:0") is pdc_core.get_backend("metal")
    with pytest.raises(BackendUnavailable, match=r"metal:1 does not exist"):
        pdc_core.get_backend("metal:1")


@needs_mlx
def test_metal_shaders_need_metal() -> None:
    metal = metal_backend()
    if HAS_METAL:
        pytest.skip("this machine has a Metal GPU")
    with pytest.raises(CapabilityError, match=r"MLX's CPU device.*backend\.run"):
        metal.compile_kernel("out[0] = 1;", "k", ("input_names=a", "output_names=out"))


@needs_metal
@pytest.mark.metal
def test_metal_gpu_outranks_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    metal = metal_backend()
    monkeypatch.delenv("PDC_BACKEND", raising=False)
    assert metal.device_info.kind == "gpu"
    assert MetalBackend.priority == _mlx.METAL_PRIORITY > _info("cpu").priority
    assert Capability.KERNELS in metal.capabilities
    if "cuda" not in {i.name for i in pdc_core.available_backends() if i.availability.available}:
        assert pdc_core.get_backend().name == "metal"


# -- without MLX ---------------------------------------------------------------------


def test_unavailable_without_mlx(monkeypatch: pytest.MonkeyPatch) -> None:
    with simulated_missing_mlx(monkeypatch):
        _check_unavailable()


def _check_unavailable() -> None:
    info = _info("metal")
    assert not info.availability.available
    assert info.availability.reason.startswith("MLX is not installed: pip install pdc-metal")
    assert MetalBackend.priority < _info("cpu").priority
    assert pdc_core.get_backend().name != "metal"
    with pytest.raises(BackendUnavailable, match=r"MLX is not installed: pip install pdc-metal"):
        pdc_core.get_backend("metal")


def test_buffer_metal_names_the_package_without_mlx(monkeypatch: pytest.MonkeyPatch) -> None:
    with simulated_missing_mlx(monkeypatch):
        buf = UnifiedBuffer((4,), dtype=np.float32, backend="cpu")
        with pytest.raises(BackendUnavailable, match="pip install pdc-metal"):
            _ = buf.metal


def test_broken_mlx_install_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """An mlx package whose core does not load (Linux ``mlx`` without ``[cpu]``)."""
    if _mlx.probe().available:
        monkeypatch.setitem(sys.modules, "mlx.core", None)  # ``mlx`` itself still found
    _mlx.reset_probe()
    try:
        result = _mlx.probe()
        assert not result.available
        assert result.reason.startswith("MLX is installed but does not load") or (
            result.reason.startswith("MLX is not installed")
        )
    finally:
        monkeypatch.undo()
        _mlx.reset_probe()


def test_imports_and_registers_on_a_machine_without_mlx() -> None:
    """In a fresh interpreter where ``import mlx`` fails: no crash, a clear reason."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["mlx"] = None
        sys.modules["mlx.core"] = None
        import pdc_metal, pdc_core
        info = {i.name: i for i in pdc_core.available_backends()}["metal"]
        assert not info.availability.available, info
        assert "mlx.core" not in sys.modules or sys.modules["mlx.core"] is None
        print(info.availability.reason)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MLX is not installed: pip install pdc-metal")


def test_importing_the_plugin_does_not_import_mlx() -> None:
    script = "import sys, pdc_metal; print('mlx.core' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"
