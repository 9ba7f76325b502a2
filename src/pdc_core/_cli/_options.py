"""What several ``pdc`` commands share about their options: the usage error, and the
checks of ``--backend`` and ``--async-backend`` (``pdc demo`` and ``pdc check``)."""

from __future__ import annotations

import sys

from .._exceptions import BackendError, BackendUnavailable
from .._plugins import available_backends, backend_devices, parse_backend_name, registered_backends

__all__ = ["check_async_backend", "check_backend", "usage_error"]


def usage_error(command: str, message: str) -> int:
    """Print an argparse-style usage error for ``pdc COMMAND`` and return 2."""
    print(f"usage: pdc {command} [options]\npdc {command}: error: {message}", file=sys.stderr)
    return 2


def check_backend(name: str | None, command: str) -> int:
    """0 if ``name`` (or the default) is an available backend, else a usage error (2)."""
    valid = [info.name for info in available_backends() if info.availability.available]
    if name is None:
        if not valid:
            return usage_error(command, "no backend available (pip install pdc-cpu)")
        return 0
    base = name.split(":", 1)[0].lower()
    if base not in valid:
        choices = ", ".join(repr(v) for v in valid) or "none (pip install pdc-cpu)"
        why = {
            info.name: info.availability.reason
            for info in available_backends()
            if not info.availability.available
        }.get(base)
        reason = f"the {base} backend is unavailable here: {why}; " if why else ""
        return usage_error(
            command, f"argument --backend: {reason}invalid choice: {name!r} (choose from {choices})"
        )
    problem = _device_problem(name, base)
    if problem is not None:
        return usage_error(command, f"argument --backend: {problem}")
    return 0


def _device_problem(name: str, base: str) -> str | None:
    """Why ``name``'s device index names no device of ``base`` (an available backend):
    not an index (``cpu:``, ``cpu:abc``, ``cpu:-1``) or past its devices (``cpu:7``)."""
    try:
        _, index = parse_backend_name(name)
    except BackendUnavailable as exc:
        return str(exc)
    if not index:  # device 0 is there whenever the backend is available
        return None
    try:
        devices = backend_devices(registered_backends()[base])
    except BackendError:  # its devices() fails: the check's "backend" step reports it
        return None
    if index < len(devices):
        return None
    listing = ", ".join(device.qualified_name for device in devices) or "none"
    return f"the {base} backend has no device {index} (it has {listing})"


def check_async_backend(name: str, command: str) -> int:
    """0 if ``name`` can run here, else a usage error (2) saying what to install."""
    if name == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            return usage_error(command, "--async-backend trio needs trio: pip install trio")
    return 0
