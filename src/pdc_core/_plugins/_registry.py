"""Backend lookup by name, and the choice of the default backend.

Names are ``"<backend>"`` or ``"<backend>:<device index>"`` (``"cpu"``, ``"cuda"``,
``"cuda:1"``, ``"metal"``). Without a name, ``PDC_BACKEND`` decides; otherwise the
available backend with the highest priority wins (cuda > metal > cpu).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from .._backend._contract import Availability, Backend, Capability
from .._exceptions import BackendUnavailable
from . import _loader

__all__ = [
    "KNOWN_DISTRIBUTIONS",
    "BackendInfo",
    "available_backends",
    "default_backend_name",
    "get_backend",
    "reload_plugins",
    "resolve_backend",
]

#: Where the first-party backends come from, for "pip install ..." hints.
KNOWN_DISTRIBUTIONS = {"cpu": "pdc-cpu", "cuda": "pdc-cuda", "metal": "pdc-metal"}


@dataclass(frozen=True)
class BackendInfo:
    """A registered backend and whether it can run here."""

    name: str
    distribution: str
    plugin: str | None
    priority: int
    availability: Availability
    capabilities: frozenset[Capability]


_instances: dict[tuple[str, int], Backend] = {}
_availability: dict[str, Availability] = {}
_lock = threading.Lock()


def reload_plugins() -> None:
    """Forget loaded plugins so the next use rescans entry points and ``PDC_PLUGINS``.

    Backend instances already handed out stay valid; later lookups make new ones.
    """
    _loader.forget_plugins()
    with _lock:
        _instances.clear()
        _availability.clear()


def _probe(backend: type[Backend]) -> Availability:
    cached = _availability.get(backend.name)
    if cached is None:
        try:
            cached = backend.availability()
            if not isinstance(cached, Availability):
                cached = Availability.no(
                    f"availability() returned {cached!r} instead of an Availability"
                )
        except Exception as exc:  # a buggy plugin must not break lookup of the others
            cached = Availability.no(f"availability() raised {type(exc).__name__}: {exc}")
        _availability[backend.name] = cached
    return cached


def available_backends() -> list[BackendInfo]:
    """Every registered backend, best first, available or not."""
    infos = [
        BackendInfo(
            name=cls.name,
            distribution=cls.distribution,
            plugin=_loader.plugin_of_backend(cls.name),
            priority=cls.priority,
            availability=_probe(cls),
            capabilities=frozenset(cls.capabilities),
        )
        for cls in _loader.registered_backends().values()
    ]
    infos.sort(key=lambda info: (not info.availability.available, -info.priority, info.name))
    return infos


def default_backend_name() -> str:
    """``PDC_BACKEND`` if set, else the best available backend's name."""
    chosen = os.environ.get("PDC_BACKEND", "").strip()
    if chosen:
        return chosen
    for info in available_backends():
        if info.availability.available:
            return info.name
    raise BackendUnavailable(_no_backend_message())


def _parse(name: str) -> tuple[str, int]:
    if not isinstance(name, str) or not name.strip():
        raise BackendUnavailable(f"a backend name must be a non-empty string, not {name!r}")
    base, sep, index_text = name.strip().lower().partition(":")
    if not sep:
        return base, 0
    try:
        index = int(index_text)
    except ValueError:
        raise BackendUnavailable(
            f"invalid backend name {name!r}: the part after ':' must be a device index, "
            "as in 'cuda:1'"
        ) from None
    if index < 0:
        raise BackendUnavailable(f"invalid backend name {name!r}: device index is negative")
    return base, index


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (``"cuda:1"`` selects device 1), or the default one.

    Raises :class:`~pdc_core.BackendUnavailable` when the name is unknown, the
    backend cannot run here, or the device index is out of range; the message lists
    what is installed, why the requested one is unavailable and what to install.
    """
    base, index = _parse(name if name is not None else default_backend_name())
    key = (base, index)
    instance = _instances.get(key)
    if instance is not None:
        return instance
    backends = _loader.registered_backends()
    cls = backends.get(base)
    if cls is None:
        raise BackendUnavailable(_unknown_message(base))
    availability = _probe(cls)
    if not availability.available:
        raise BackendUnavailable(
            f"the {base} backend (from {cls.distribution}) is not available here: "
            f"{availability.reason}.\n{_installed_summary()}"
        )
    devices = cls.devices()
    if index >= len(devices):
        listing = ", ".join(f"{d.qualified_name} ({d.name})" for d in devices) or "none"
        raise BackendUnavailable(
            f"{base}:{index} does not exist: the {base} backend has {len(devices)} "
            f"device(s): {listing}"
        )
    with _lock:
        instance = _instances.get(key)
        if instance is None:
            instance = cls(device=index)
            _instances[key] = instance
    return instance


def resolve_backend(backend: Backend | str | None) -> Backend:
    """``backend`` itself, the backend of that name, or the default one (``None``).

    Raises :class:`TypeError` for anything else, and what :func:`get_backend` raises.
    """
    if isinstance(backend, Backend):
        return backend
    if backend is None or isinstance(backend, str):
        return get_backend(backend)
    raise TypeError(f"backend must be a Backend or a name, not {type(backend).__name__}")


def _installed_summary() -> str:
    infos = available_backends()
    if not infos:
        return "No backend is installed."
    lines = ["Installed backends:"]
    for info in infos:
        state = "available" if info.availability.available else "unavailable"
        reason = f": {info.availability.reason}" if info.availability.reason else ""
        lines.append(f"  {info.name} ({info.distribution}) - {state}{reason}")
    return "\n".join(lines)


def _failed_summary() -> str:
    failed = list(_loader.failed_plugins())
    if not failed:
        return ""
    lines = ["Plugins that failed to load:"]
    lines += [f"  {info.name}: {info.error}" for info in failed]
    return "\n" + "\n".join(lines)


def _unknown_message(base: str) -> str:
    hint = KNOWN_DISTRIBUTIONS.get(base)
    install = (
        f" Install it with: pip install {hint}"
        if hint
        else " No known distribution provides it; check the name."
    )
    return f"unknown backend {base!r}.{install}\n{_installed_summary()}{_failed_summary()}"


def _no_backend_message() -> str:
    return (
        "no pdc backend is available. Install one, for example: pip install pdc-cpu\n"
        f"{_installed_summary()}{_failed_summary()}"
    )
