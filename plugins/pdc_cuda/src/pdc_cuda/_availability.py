"""Whether the CUDA backend can run here, and if not, the precise reason.

Probing is split in two so every branch can be tested on a machine without a GPU:
:func:`probe` gathers facts (is CuPy installed, can the driver library be loaded,
what do the driver and runtime report) and never raises; :func:`diagnose` turns those
facts into an :class:`~pdc_core.backend.Availability` with a message a user can act on.

The probe asks the cheap questions first and imports CuPy only when they all say yes:
whether CuPy is installed (``importlib.util.find_spec``, no import), whether exactly one
CuPy distribution provides it (``importlib.metadata``, no import), and whether the
driver library loads. On a machine without an NVIDIA driver, choosing pdc's default
backend therefore never imports CuPy (tens of milliseconds and a large module tree).
The plugin registers the backend lazily with :data:`PRIORITY` and :func:`availability`
(this module imports nothing else of pdc-cuda's), so the rest of pdc-cuda is not
imported either.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass

from pdc_core.backend import Availability

__all__ = [
    "PRIORITY",
    "CudaProbe",
    "availability",
    "diagnose",
    "format_cuda_version",
    "prefer_eager_module_loading",
    "probe",
]

#: Where the cuda backend ranks when pdc picks the best one (above metal and cpu).
PRIORITY = 100
#: ``cudaErrorInsufficientDriver``: the driver is older than the runtime CuPy was built for.
CUDA_ERROR_INSUFFICIENT_DRIVER = 35
#: ``cudaErrorNoDevice``: a driver is installed but it sees no CUDA device.
CUDA_ERROR_NO_DEVICE = 100

INSTALL_HINT = "pip install pdc-cuda"

#: The distributions that install the ``cupy`` package (CuPy's wheels, one per CUDA
#: major or ROCm release, and its source package). They all write the same files, so
#: two of them in one environment leave a ``cupy`` of mixed builds.
CUPY_DISTRIBUTIONS = (
    "cupy",
    "cupy-cuda11x",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "cupy-rocm-4-3",
    "cupy-rocm-5-0",
    "cupy-rocm-7-0",
)

#: The driver library, by platform (the runtime CuPy links against loads it itself).
DRIVER_LIBRARIES = {"win32": ("nvcuda.dll",)}
DEFAULT_DRIVER_LIBRARIES = ("libcuda.so.1", "libcuda.so")


@dataclass(frozen=True)
class CudaProbe:
    """Facts about this machine's CUDA stack, as gathered by :func:`probe`."""

    #: ``None`` when ``import cupy`` worked, else the error (``ModuleNotFoundError`` ...).
    cupy_error: BaseException | None = None
    #: ``(name, version)`` of each CuPy distribution installed when more than one is
    #: (then CuPy is not imported); empty otherwise.
    cupy_distributions: tuple[tuple[str, str], ...] = ()
    cupy_version: str | None = None
    #: Whether the CUDA driver library (``libcuda.so``) could be loaded.
    driver_found: bool = False
    #: ``cudaDriverGetVersion`` (e.g. 12040), 0 when no driver is installed.
    driver_version: int | None = None
    #: The CUDA runtime version CuPy was built for (e.g. 12090).
    runtime_version: int | None = None
    #: ``cudaGetDeviceCount`` when it succeeded.
    device_count: int | None = None
    #: The ``cudaError_t`` status and message when ``cudaGetDeviceCount`` failed.
    error_status: int | None = None
    error_text: str | None = None


def format_cuda_version(version: int | None) -> str:
    """``12040`` -> ``"12.4"`` (CUDA encodes versions as ``1000*major + 10*minor``)."""
    if not version:
        return "unknown"
    return f"{version // 1000}.{(version % 1000) // 10}"


def _driver_loadable() -> bool:
    names = DRIVER_LIBRARIES.get(sys.platform, DEFAULT_DRIVER_LIBRARIES)
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def _cupy_installed() -> bool:
    try:
        return importlib.util.find_spec("cupy") is not None
    except (ImportError, ValueError):  # a broken parent package or a half-removed module
        return False


def _cupy_distributions() -> tuple[tuple[str, str], ...]:
    """``(name, version)`` of each installed distribution of :data:`CUPY_DISTRIBUTIONS`."""
    found = []
    for name in CUPY_DISTRIBUTIONS:
        # A lookup by name reads directory listings only, where finding the owners of
        # the ``cupy`` package (packages_distributions) reads every distribution's files.
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return tuple(found)


def prefer_eager_module_loading() -> None:
    """Set ``CUDA_MODULE_LOADING=EAGER`` unless the user chose a mode.

    Since CUDA 12.2 the driver loads kernels lazily, on first use, and "loading
    kernels might require context synchronization" (CUDA Programming Guide, Lazy
    Loading, Potential Hazards): loading any kernel while a resident ring kernel
    runs could then wait for that kernel forever. The variable is read once, when CUDA
    initialises in this process, so this runs before pdc's first CUDA call; it has no
    effect if CUDA was initialised earlier (set the variable yourself then).
    """
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")


def probe() -> CudaProbe:
    """Gather the facts :func:`diagnose` needs. Never raises."""
    prefer_eager_module_loading()
    if not _cupy_installed():
        return CudaProbe(cupy_error=ModuleNotFoundError("No module named 'cupy'", name="cupy"))
    distributions = _cupy_distributions()
    if len(distributions) > 1:  # a cupy of mixed builds: importing it may fail or crash
        return CudaProbe(cupy_distributions=distributions)
    if not _driver_loadable():  # no driver, no GPU: not worth importing CuPy to say so
        return CudaProbe(driver_found=False)
    try:
        import cupy
    except Exception as exc:  # ImportError, or CuPy failing while it loads its libraries
        return CudaProbe(cupy_error=exc)
    version = str(getattr(cupy, "__version__", "unknown"))
    runtime = cupy.cuda.runtime
    driver_version: int | None
    runtime_version: int | None
    try:
        driver_version = int(runtime.driverGetVersion())
    except Exception:
        driver_version = None
    try:
        runtime_version = int(runtime.runtimeGetVersion())
    except Exception:
        runtime_version = None
    try:
        count = int(runtime.getDeviceCount())
    except Exception as exc:
        return CudaProbe(
            cupy_version=version,
            driver_found=True,
            driver_version=driver_version,
            runtime_version=runtime_version,
            error_status=getattr(exc, "status", None),
            error_text=str(exc),
        )
    return CudaProbe(
        cupy_version=version,
        driver_found=True,
        driver_version=driver_version,
        runtime_version=runtime_version,
        device_count=count,
    )


def availability() -> Availability:
    """Whether the cuda backend can run here, and why not (:func:`diagnose` of :func:`probe`)."""
    return diagnose(probe())


def _visible_devices_note() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return ""
    return f" (CUDA_VISIBLE_DEVICES={visible!r} hides devices)"


def _cupy_installed_twice(distributions: tuple[tuple[str, str], ...]) -> str:
    installed = ", ".join(f"{name} {version}" for name, version in distributions)
    names = " ".join(name for name, _ in distributions)
    # Uninstalling only one would delete files the other wrote too: remove all, add one.
    return (
        f"CuPy is installed more than once ({installed}), and each writes the same cupy "
        f"package: pip uninstall -y {names}, then pip install the one for this machine "
        "(cupy-cuda12x for CUDA 12, cupy-cuda13x for CUDA 13)"
    )


def diagnose(facts: CudaProbe) -> Availability:
    """Turn probed facts into an availability verdict with an actionable reason."""
    if len(facts.cupy_distributions) > 1:
        return Availability.no(_cupy_installed_twice(facts.cupy_distributions))
    if facts.cupy_error is not None:
        if isinstance(facts.cupy_error, ModuleNotFoundError) and (
            facts.cupy_error.name in (None, "cupy") or "cupy" in str(facts.cupy_error)
        ):
            return Availability.no(f"CuPy is not installed: {INSTALL_HINT}")
        error = f"{type(facts.cupy_error).__name__}: {facts.cupy_error}"
        return Availability.no(
            f"CuPy is installed but failed to import ({error}); reinstall it with "
            f"{INSTALL_HINT} --force-reinstall"
        )
    if not facts.driver_found or facts.driver_version == 0:
        return Availability.no("no CUDA driver (libcuda.so not found)")
    if facts.error_status == CUDA_ERROR_NO_DEVICE or facts.device_count == 0:
        return Availability.no(f"CUDA driver found but no device{_visible_devices_note()}")
    if facts.error_status == CUDA_ERROR_INSUFFICIENT_DRIVER:
        return Availability.no(
            f"the CUDA driver supports CUDA {format_cuda_version(facts.driver_version)} but "
            f"CuPy {facts.cupy_version} needs CUDA {format_cuda_version(facts.runtime_version)}: "
            "update the NVIDIA driver"
        )
    if facts.device_count is None:
        return Availability.no(
            f"CUDA driver found but it failed to enumerate devices: {facts.error_text}"
        )
    return Availability.yes(
        f"{facts.device_count} CUDA device(s), driver CUDA "
        f"{format_cuda_version(facts.driver_version)}, CuPy {facts.cupy_version}"
    )
