"""Lazy access to MLX: the probe that decides availability, and NumPy <-> MLX dtypes.

Nothing here imports MLX at module import time, so ``pdc_metal`` imports (and its
backend registers and reports why it is unavailable) on a machine without MLX.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from pdc_core import BackendUnavailable
from pdc_core.backend import Availability

__all__ = [
    "CPU_DEVICE_PRIORITY",
    "METAL_PRIORITY",
    "MlxDevice",
    "MlxProbe",
    "availability",
    "from_mlx_dtype",
    "load",
    "metal_possible",
    "priority",
    "probe",
    "reset_probe",
    "to_mlx_dtype",
]


class MlxDevice(Protocol):
    """What the metal backend's parts need of it (``MetalBackend`` is one): MLX itself and
    the MLX device its work runs on. The parts know no backend class."""

    @property
    def mx(self) -> ModuleType:
        """``mlx.core``, as the backend loaded it."""

    mlx_device: Any


#: Priority with a Metal GPU: above the cpu backend (0), below cuda (100).
METAL_PRIORITY = 50
#: Priority when MLX runs on its CPU device: below the cpu backend, so that pdc's best
#: available choice stays plain NumPy unless a real Metal GPU is there.
CPU_DEVICE_PRIORITY = -10

_NOT_INSTALLED = "MLX is not installed: pip install pdc-metal (it depends on mlx)"


@dataclass(frozen=True)
class MlxProbe:
    """What importing MLX on this machine found."""

    #: MLX imports and can compute (on the Metal GPU or on its CPU device).
    available: bool
    #: Why not, or which device it runs on.
    reason: str
    #: MLX has a Metal device here (Apple silicon).
    metal: bool = False
    version: str | None = None


_lock = threading.Lock()
_probe: MlxProbe | None = None


def _run_probe() -> MlxProbe:
    try:
        spec = importlib.util.find_spec("mlx")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return MlxProbe(False, _NOT_INSTALLED)
    try:
        mx = importlib.import_module("mlx.core")
    except ImportError as exc:
        if exc.name in ("mlx", "mlx.core") and "No module named" in str(exc):
            return MlxProbe(False, _NOT_INSTALLED)
        hint = (
            "on Linux the plain mlx wheel has no compute library: pip install 'mlx[cpu]'"
            if platform.system() == "Linux"
            else "reinstall it: pip install --force-reinstall mlx"
        )
        return MlxProbe(False, f"MLX is installed but does not load ({exc}); {hint}")
    except Exception as exc:  # a broken install must not break plugin loading
        return MlxProbe(False, f"importing MLX failed: {type(exc).__name__}: {exc}")
    version = str(getattr(mx, "__version__", "unknown"))
    try:
        metal = bool(mx.metal.is_available())
    except Exception:
        metal = False
    if metal:
        return MlxProbe(True, f"MLX {version} on the Metal GPU", True, version)
    return MlxProbe(
        True,
        f"MLX {version}: MLX has no Metal device here; using MLX's CPU device "
        "(ranked below the cpu backend)",
        False,
        version,
    )


def metal_possible() -> bool:
    """Whether this machine could have a Metal GPU (macOS on Apple silicon); no import."""
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def probe() -> MlxProbe:
    """The (cached) result of importing MLX; never raises."""
    global _probe
    result = _probe
    if result is None:
        with _lock:
            if _probe is None:
                _probe = _run_probe()
            result = _probe
    return result


def priority() -> int:
    """Where the metal backend ranks when pdc picks the best one: above cpu with a
    Metal GPU, below it on MLX's CPU device."""
    # Read when pdc ranks backends to pick the default: off Apple silicon no Metal GPU can
    # exist, so the rank is known without importing MLX (which then is never imported
    # unless the metal backend is asked for).
    if not metal_possible():
        return CPU_DEVICE_PRIORITY
    return METAL_PRIORITY if probe().metal else CPU_DEVICE_PRIORITY


def availability() -> Availability:
    """Whether the metal backend can run here (MLX imports and computes), and why not."""
    result = probe()
    return Availability.yes(result.reason) if result.available else Availability.no(result.reason)


def reset_probe() -> None:
    """Forget the cached probe (tests that simulate a machine without MLX use it)."""
    global _probe
    with _lock:
        _probe = None


def load() -> ModuleType:
    """``mlx.core``, or :class:`~pdc_core.BackendUnavailable` saying why it cannot run."""
    result = probe()
    if not result.available:
        raise BackendUnavailable(f"the metal backend is not available here: {result.reason}")
    return importlib.import_module("mlx.core")


# -- dtypes ----------------------------------------------------------------------------

#: NumPy dtype names MLX represents exactly (``bfloat16`` has no NumPy equivalent).
_SUPPORTED = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
)


_to_mlx: dict[np.dtype[Any], Any] = {}


def to_mlx_dtype(dtype: np.dtype[Any]) -> Any:
    """The MLX dtype that holds ``dtype`` exactly, or ``TypeError`` naming it.

    MLX would silently narrow some dtypes (``mx.array`` turns complex128 into
    complex64); pdc refuses them instead of losing data. Cached: this sits on the
    path of every device view.
    """
    dtype = np.dtype(dtype)
    cached = _to_mlx.get(dtype)
    if cached is not None:
        return cached
    mx = load()
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not dtype.isnative):
        raise TypeError(
            f"dtype {dtype.str} is not in native byte order; MLX cannot hold it "
            "(convert with .astype(dtype.newbyteorder('='))"
        )
    if dtype.fields is not None or dtype.name not in _SUPPORTED:
        raise TypeError(
            f"dtype {dtype} has no exact MLX equivalent, so the metal backend cannot hold it "
            f"without changing the data; MLX supports: {', '.join(_SUPPORTED)}"
        )
    result = getattr(mx, "bool_" if dtype.name == "bool" else dtype.name)
    _to_mlx[dtype] = result
    return result


def from_mlx_dtype(mlx_dtype: Any) -> np.dtype[Any]:
    """The NumPy dtype of an MLX dtype, or ``TypeError`` (``bfloat16`` has none)."""
    mx = load()
    for name in _SUPPORTED:
        if getattr(mx, "bool_" if name == "bool" else name) == mlx_dtype:
            return np.dtype(name)
    raise TypeError(
        f"MLX dtype {mlx_dtype} has no NumPy equivalent; convert it first, "
        "for example with .astype(mlx.core.float32)"
    )
