"""What several ``pdc`` commands share about their options and errors: the usage error
(on stderr, and as JSON on stdout under ``--json``), and the checks of ``--backend``
and ``--async-backend`` (``pdc demo`` and ``pdc check``)."""

from __future__ import annotations

import json
import sys

from .._exceptions import BackendError, BackendUnavailable
from .._plugins import (
    CPU_INSTALL_HINT,
    available_backends,
    backend_class,
    backend_devices,
    no_backend_line,
    parse_backend_name,
)

__all__ = [
    "check_async_backend",
    "check_backend",
    "error",
    "json_error",
    "set_json_errors",
    "usage_error",
]

#: Whether the running command was given ``--json``: its errors go to stdout as JSON
#: too, so a program reading stdout always gets a JSON document. Set by ``main``.
_json_errors = False


def set_json_errors(enabled: bool) -> None:
    """Make :func:`error` (and so :func:`usage_error`) also print JSON on stdout."""
    global _json_errors
    _json_errors = enabled


def error(command: str, message: str, *, status: int = 2, usage: bool = False) -> int:
    """Report ``pdc COMMAND: error: MESSAGE`` on stderr; under ``--json`` also print
    ``{"ok": false, "error": ..., "status": ...}`` on stdout. Returns ``status``."""
    line = f"pdc {command}: error: {message}"
    print(f"usage: pdc {command} [options]\n{line}" if usage else line, file=sys.stderr)
    json_error(line, status)
    return status


def json_error(line: str, status: int = 2) -> None:
    """Under ``--json``, print an error as the command's JSON document on stdout."""
    if _json_errors:
        json.dump({"ok": False, "error": line, "status": status}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()


def usage_error(command: str, message: str) -> int:
    """Print an argparse-style usage error for ``pdc COMMAND`` and return 2."""
    return error(command, message, usage=True)


#: What runs a first-party backend's code on a machine that cannot run the backend.
_ELSEWHERE = {
    "cuda": (
        ". Without a GPU, pdc_cuda.testing.HostCudaBackend runs the cuda backend's "
        "persistent-kernel code and its CUDA ring kernel built for the host "
        "(docs/cuda-backend.md, the host build)"
    ),
}


def check_backend(name: str | None, command: str) -> int:
    """0 if ``name`` (or the default) is an available backend, else a usage error (2).

    A backend that is installed but cannot run here is named as such, with its reason
    and what to do; an unknown name lists the choices.
    """
    infos = available_backends()
    valid = [info.name for info in infos if info.availability.available]
    if name is None:
        return usage_error(command, no_backend_line()) if not valid else 0
    base = name.split(":", 1)[0].lower()
    if base in valid:
        problem = _device_problem(name, base)
        return 0 if problem is None else usage_error(command, f"argument --backend: {problem}")
    instead = (
        f"choose from {', '.join(repr(v) for v in valid)}"
        if valid
        else f"install the cpu backend: {CPU_INSTALL_HINT}"
    )
    unusable = {info.name: info for info in infos if not info.availability.available}
    if base in unusable:
        # Not a usage error (the option is right; the machine cannot run it): no usage line.
        info = unusable[base]
        return error(
            command,
            f"argument --backend: the {base} backend ({info.distribution}) is installed but "
            f"cannot run here: {info.availability.reason}; {instead}"
            f"{_ELSEWHERE.get(base, '')}",
        )
    return usage_error(command, f"argument --backend: invalid choice: {name!r} ({instead})")


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
        devices = backend_devices(backend_class(base))
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
