"""The ``pdc`` command: ``pdc info``, ``pdc plugins`` and the commands built on them.

Each subcommand is a function ``(args) -> int`` registered in :data:`COMMANDS` with
the function that adds its options; the exit status follows argparse's convention
(2 for a usage error).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from .. import _plugins
from .._exceptions import BackendError, BackendUnavailable, EnvironmentSettingError
from .._version import __version__
from . import _options

__all__ = [
    "COMMANDS",
    "Command",
    "build_parser",
    "main",
]

_VERSIONED_PACKAGES = ("numpy", "anyio", "trio", "pluggy", "cupy", "mlx", "rich")


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _package_version(name: str) -> str | None:
    candidates = [name]
    if name == "cupy":
        candidates += ["cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x"]
    for candidate in candidates:
        try:
            return importlib.metadata.version(candidate)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _json_default(value: Any) -> Any:
    if isinstance(value, frozenset | set):
        return sorted(value)
    return str(value)


def _emit_json(payload: object) -> None:
    json.dump(payload, sys.stdout, indent=2, default=_json_default)
    sys.stdout.write("\n")


# -- pdc plugins --------------------------------------------------------------------------


def _plugins_payload() -> list[dict[str, Any]]:
    return [
        {
            "name": info.name,
            "distribution": info.distribution,
            "version": info.version,
            "hooks": info.hooks,
            "backends": info.backends,
            "placements": info.placements,
            "info_sections": info.info_sections,
            "benchmarks": info.benchmarks,
            "error": info.error,
        }
        for info in _plugins.list_plugins()
    ]


def _selection_line() -> str | None:
    """What ``PDC_PLUGINS`` left out, when it is set."""
    selection = _plugins.plugin_selection()
    if selection.raw is None:
        return None
    left_out = ", ".join(
        f"{info.name} ({info.distribution} {info.version})" if info.distribution else info.name
        for info in selection.filtered_out
    )
    return f"PDC_PLUGINS={selection.raw!r} filtered out: {left_out or 'nothing'}"


def _run_plugins(args: argparse.Namespace) -> int:
    payload = _plugins_payload()
    if args.json:
        _emit_json(payload)
        return 0
    selection = _selection_line()
    if not payload:
        print(f"No pdc plugins installed (entry-point group {_plugins.ENTRY_POINT_GROUP!r}).")
        if selection is None:
            print(f"Install one, for example: {_plugins.CPU_INSTALL_HINT}")
        else:
            print(selection)
        return 0
    for plugin in payload:
        dist = f"{plugin['distribution']} {plugin['version']}" if plugin["distribution"] else ""
        print(f"{plugin['name']}  ({dist})" if dist else plugin["name"])
        print(f"  hooks:    {', '.join(plugin['hooks']) or '-'}")
        print(f"  backends: {', '.join(plugin['backends']) or '-'}")
        if plugin["placements"]:
            print(f"  placements: {', '.join(plugin['placements'])}")
        if plugin["info_sections"]:
            print(f"  info:     {', '.join(plugin['info_sections'])}")
        if plugin["benchmarks"]:
            print(f"  benchmarks: {', '.join(plugin['benchmarks'])} (pdc bench --backend)")
        if plugin["error"]:
            print(f"  error:    {plugin['error']}")
    if selection is not None:
        print(selection)
    return 0


# -- pdc info -----------------------------------------------------------------------------


def _info_payload() -> dict[str, Any]:
    backends = []
    for info in _plugins.available_backends():
        entry: dict[str, Any] = {
            "name": info.name,
            "distribution": info.distribution,
            "plugin": info.plugin,
            "priority": info.priority,
            "available": info.availability.available,
            "reason": info.availability.reason,
            "capabilities": sorted(info.capabilities),
            "devices": [],
        }
        if info.availability.available:
            try:
                devices = _plugins.backend_devices(_plugins.backend_class(info.name))
            except BackendError as exc:  # whatever devices() raised, SystemExit included
                entry["error"] = str(exc)
            else:
                entry["devices"] = [
                    {
                        "name": device.qualified_name,
                        "description": device.name,
                        "kind": device.kind,
                        "total_memory": device.total_memory,
                        "properties": dict(device.properties),
                    }
                    for device in devices
                ]
        backends.append(entry)
    errors = []
    try:
        _plugins.check_environment()
    except EnvironmentSettingError as exc:
        errors.append(str(exc))
    try:
        default: str | None = _plugins.default_backend_name()
        best = default
    except EnvironmentSettingError as exc:  # reported in errors
        default = None
        # The best available backend is still there: the default once PDC_BACKEND is
        # fixed or unset (get_backend() raises until then).
        best = _plugins.best_available() if exc.variable == "PDC_BACKEND" else None
    except LookupError:
        default = best = None
    return {
        "pdc_core": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "default_backend": default,
        "best_available": best,
        "backends": backends,
        "packages": {name: _package_version(name) for name in _VERSIONED_PACKAGES},
        "plugin_errors": _plugin_errors(),
        "sections": _info_sections(),
        "errors": errors,
    }


def _info_sections() -> dict[str, dict[str, Any]]:
    """What each plugin's ``pdc_register_info`` report says, by section name.

    A report that raises (anything but KeyboardInterrupt) or returns something other
    than a mapping is shown as the section's ``error``; the other sections still show.
    """
    sections: dict[str, dict[str, Any]] = {}
    for name, registration in sorted(_plugins.registered_info_sections().items()):
        plugin = registration.plugin
        section: dict[str, Any] = {
            "title": registration.description or name,
            "plugin": plugin.name,
            "distribution": plugin.distribution,
            "version": plugin.version,
        }
        try:
            report = registration.target()
            if not isinstance(report, Mapping):
                raise TypeError(f"the report is {report!r}, not a mapping")
            section["report"] = {str(key): value for key, value in report.items()}
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a plugin's report must not break `pdc info`
            what = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            section["error"] = f"{name} report failed: {what}"
        sections[name] = section
    return sections


def _print_value(key: str, value: Any, indent: str) -> None:
    if isinstance(value, Mapping):
        print(f"{indent}{key}:")
        if not value:
            print(f"{indent}  -")
        for inner_key, inner in value.items():
            _print_value(str(inner_key), inner, indent + "  ")
    elif isinstance(value, list | tuple):
        print(f"{indent}{key}: {', '.join(str(item) for item in value) or '-'}")
    elif isinstance(value, float):
        print(f"{indent}{key}: {value:g}")
    else:
        print(f"{indent}{key}: {value}")


def _plugin_errors() -> dict[str, str]:
    """Errors by plugin name; by ``dist:name`` where distributions share a name."""
    plugins = _plugins.list_plugins()
    names = [info.name for info in plugins]
    return {
        info.name if names.count(info.name) == 1 else info.qualified_name: info.error
        for info in plugins
        if info.error is not None
    }


def _format_bytes(count: int | None) -> str:
    if count is None:
        return "unknown"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{count} B"
        value /= 1024
    raise AssertionError("unreachable")


def _run_info(args: argparse.Namespace) -> int:
    payload = _info_payload()
    if args.json:
        _emit_json(payload)
        return 0
    print(f"pdc-core {payload['pdc_core']} on Python {payload['python']} ({payload['platform']})")
    default = payload["default_backend"]
    best = payload["best_available"]
    if default is None and best is not None:  # PDC_BACKEND cannot be used
        default = f"{best}, the best available, once PDC_BACKEND is fixed or unset (see the error)"
    print(f"default backend: {default or 'none available'}")
    for error in payload["errors"]:
        print(f"error: {error}")
    print()
    print("Backends:")
    if not payload["backends"]:
        print(f"  none installed ({_plugins.CPU_INSTALL_HINT})")
    for backend in payload["backends"]:
        state = "available" if backend["available"] else "unavailable"
        reason = f": {backend['reason']}" if backend["reason"] else ""
        print(f"  {backend['name']} ({backend['distribution']}) - {state}{reason}")
        if backend["capabilities"]:
            print(f"    capabilities: {', '.join(backend['capabilities'])}")
        if "error" in backend:
            print(f"    error: {backend['error']}")
        for device in backend["devices"]:
            memory = _format_bytes(device["total_memory"])
            print(f"    {device['name']}: {device['description']} ({device['kind']}, {memory})")
            for key, value in device["properties"].items():
                print(f"      {key}: {value}")
    for name, error in payload["plugin_errors"].items():
        print(f"  plugin {name} failed: {error}")
    for section in payload["sections"].values():
        dist = " ".join(part for part in (section["distribution"], section["version"]) if part)
        print()
        print(f"{section['title']} (from {dist or section['plugin']}):")
        if "error" in section:
            print(f"  error: {section['error']}")
        for key, value in section.get("report", {}).items():
            _print_value(key, value, "  ")
    print()
    print("Packages:")
    for name, version in payload["packages"].items():
        print(f"  {name}: {version or 'not installed'}")
    return 0


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def _add_demo(parser: argparse.ArgumentParser) -> None:
    from . import _demo

    _demo.add_arguments(parser)


def _run_demo(args: argparse.Namespace) -> int:
    from . import _demo

    return _demo.run(args)


def _add_bench(parser: argparse.ArgumentParser) -> None:
    from . import _bench

    _bench.add_arguments(parser)


def _run_bench(args: argparse.Namespace) -> int:
    from . import _bench

    return _bench.run(args)


def _add_check(parser: argparse.ArgumentParser) -> None:
    from . import _check

    _check.add_arguments(parser)


def _run_check(args: argparse.Namespace) -> int:
    from . import _check

    return _check.run(args)


COMMANDS: dict[str, Command] = {
    "info": Command("show backends, devices and versions", _add_json, _run_info),
    "plugins": Command("list installed plugins and their hooks", _add_json, _run_plugins),
    "demo": Command(
        "streaming anomaly detection through actors (the main job)", _add_demo, _run_demo
    ),
    "bench": Command(
        "latency and throughput benchmarks, with an optional plot", _add_bench, _run_bench
    ),
    "check": Command(
        "check one backend end to end: memory, copies, a kernel, a resident kernel",
        _add_check,
        _run_check,
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are JSON on stdout too under ``--json``."""

    def error(self, message: str) -> NoReturn:
        _options.json_error(f"{self.prog}: error: {message}")  # main looked for --json
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pdc", description="pdc: structured concurrency for GPU actors")
    parser.add_argument("--version", action="version", version=f"pdc-core {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


#: The commands that report on the installation: with an unusable PDC_BACKEND or
#: PDC_PLUGINS they still print their report (the error is in it), then fail.
_REPORTS = frozenset({"info", "plugins"})


def _print_error(command: str, error: BaseException) -> None:
    _options.error(command, str(error))


def _environment_error(args: argparse.Namespace) -> EnvironmentSettingError | None:
    """What is wrong with PDC_PLUGINS and PDC_BACKEND for this command, if anything.

    PDC_BACKEND matters only to a command that uses the default backend: not where
    ``--backend`` names one.
    """
    try:
        with warnings.catch_warnings():
            # The loader warns about PDC_PLUGINS entries that select nothing: the error
            # printed here says it in one line.
            warnings.filterwarnings("ignore", message="PDC_PLUGINS=", category=UserWarning)
            _plugins.check_environment(backend=getattr(args, "backend", None) is None)
    except EnvironmentSettingError as exc:
        return exc
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pdc`` console script; returns the exit status.

    An unusable ``PDC_BACKEND`` or ``PDC_PLUGINS`` (an
    :class:`~pdc_core.EnvironmentSettingError`) is a one-line error on stderr and exit
    status 2 in every command: ``info`` and ``plugins`` print their report first, the
    others run nothing. A backend that cannot be used is an error message, never a
    traceback.
    """
    _options.set_json_errors("--json" in (sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    _options.set_json_errors(bool(getattr(args, "json", False)))
    try:
        environment = _environment_error(args)
        if environment is not None and args.command not in _REPORTS:
            _print_error(args.command, environment)
            return 2
        status: int = args.run(args)
        sys.stdout.flush()
        if environment is not None:
            _options.set_json_errors(False)  # the report printed is the JSON document
            _print_error(args.command, environment)
            return 2
    except BackendUnavailable as exc:  # EnvironmentSettingError included
        _print_error(args.command, exc)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`pdc info | head`): say nothing more, and keep Python's
        # own flush at exit from failing on the closed pipe too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
