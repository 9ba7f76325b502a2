"""Plugin discovery: the ``pdc`` entry points, loaded lazily, each in isolation.

Plugins are found through the ``pdc`` entry-point group. Each entry point names an
object (usually a module) carrying hook implementations marked with
:data:`hookimpl`. Hooks are synchronous and *register* things::

    from pdc_core.backend import hookimpl

    @hookimpl
    def pdc_register_backends(register):
        register(MyBackend)

Loading is lazy (the first time backends are needed, never at ``import pdc_core``)
and isolated: a plugin that fails to import, raises in a hook, registers something
that is not a backend or returns a value from a ``register`` hook is recorded with
its error and skipped. ``PDC_PLUGINS=cpu,cuda`` loads only the named entry points.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field

import pluggy

from .._backend._contract import Backend
from .._exceptions import PluginError
from ._hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME, PdcHookSpecs

__all__ = [
    "PluginInfo",
    "failed_plugins",
    "forget_plugins",
    "list_plugins",
    "plugin_of_backend",
    "plugin_state",
    "registered_backends",
]


@dataclass
class PluginInfo:
    """What ``pdc plugins`` shows about one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    hooks: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def loaded(self) -> bool:
        return self.error is None


class _PluginState:
    """Loaded plugins and the backends they registered; built once, on demand."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(PROJECT_NAME)
        self.manager.add_hookspecs(PdcHookSpecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.backends: dict[str, type[Backend]] = {}
        self.backend_plugin: dict[str, str] = {}


_state: _PluginState | None = None
_lock = threading.Lock()


def _selected_names() -> set[str] | None:
    raw = os.environ.get("PDC_PLUGINS", "").strip()
    if not raw:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def _format_error(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()


def _load() -> _PluginState:
    state = _PluginState()
    selected = _selected_names()
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if selected is not None and entry_point.name not in selected:
            continue
        if entry_point.name in state.plugins:
            continue  # the same distribution seen twice on sys.path
        dist = entry_point.dist
        info = PluginInfo(
            name=entry_point.name,
            distribution=dist.name if dist is not None else None,
            version=dist.version if dist is not None else None,
        )
        state.plugins[info.name] = info
        try:
            plugin = entry_point.load()
            state.manager.register(plugin, name=info.name)
        except Exception as exc:
            info.error = f"failed to load: {_format_error(exc)}"
            continue
        info.hooks = sorted(caller.name for caller in state.manager.get_hookcallers(plugin) or ())
    _call_register_hooks(state)
    return state


def _call_register_hooks(state: _PluginState) -> None:
    """Call each plugin's ``pdc_register_backends`` on its own, so one failure is contained.

    When two plugins register a backend of the same name, the plugin from the
    distribution the backend class names in ``distribution`` keeps it (else the first
    plugin by name); the other is reported.
    """
    claims: dict[str, list[tuple[str, type[Backend]]]] = {}
    impls = state.manager.hook.pdc_register_backends.get_hookimpls()
    for impl in sorted(impls, key=lambda impl: impl.plugin_name):
        info = state.plugins[impl.plugin_name]
        registered: list[type[Backend]] = []
        try:
            returned = impl.function(register=registered.append)
            if returned is not None:
                raise PluginError(
                    f"pdc_register_backends returned {returned!r}; "
                    "it must call register(BackendClass) and return None"
                )
            for backend in registered:
                _validate_backend(backend)
        except Exception as exc:
            info.error = f"pdc_register_backends failed: {_format_error(exc)}"
            state.manager.unregister(name=impl.plugin_name)
            continue
        for backend in registered:
            claims.setdefault(backend.name, []).append((info.name, backend))
    for name, candidates in claims.items():
        winner = next(
            (
                candidate
                for candidate in candidates
                if state.plugins[candidate[0]].distribution == candidate[1].distribution
            ),
            candidates[0],
        )
        for plugin_name, backend in candidates:
            if (plugin_name, backend) != winner:
                state.plugins[plugin_name].error = (
                    f"registers backend {name!r}, which plugin {winner[0]!r} also registers; "
                    "skipped"
                )
                continue
            state.backends[name] = backend
            state.backend_plugin[name] = plugin_name
            state.plugins[plugin_name].backends.append(name)


def _validate_backend(backend: object) -> None:
    if not (isinstance(backend, type) and issubclass(backend, Backend)):
        raise PluginError(
            f"register() was given {backend!r}, which is not a subclass of pdc_core.backend.Backend"
        )
    name = getattr(backend, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise PluginError(
            f"backend class {backend.__qualname__} has an invalid name {name!r}: "
            "it must be a lower-case identifier such as 'cuda'"
        )
    if not isinstance(getattr(backend, "distribution", None), str):
        raise PluginError(f"backend class {backend.__qualname__} does not set 'distribution'")
    if getattr(backend, "__abstractmethods__", None):
        missing = ", ".join(sorted(backend.__abstractmethods__))
        raise PluginError(f"backend class {backend.__qualname__} does not implement: {missing}")


def plugin_state() -> _PluginState:
    """The loaded plugins, loading them on first use (thread-safe)."""
    global _state
    state = _state
    if state is None:
        with _lock:
            if _state is None:
                _state = _load()
            state = _state
    return state


def forget_plugins() -> None:
    """Forget loaded plugins so the next use rescans entry points and ``PDC_PLUGINS``."""
    global _state
    with _lock:
        _state = None


def list_plugins() -> list[PluginInfo]:
    """Every plugin found in the ``pdc`` entry-point group, loaded or not."""
    return sorted(plugin_state().plugins.values(), key=lambda info: info.name)


def registered_backends() -> dict[str, type[Backend]]:
    """Backend classes registered by plugins, by name."""
    return dict(plugin_state().backends)


def plugin_of_backend(name: str) -> str | None:
    """The plugin that registered the backend ``name``, if any."""
    return plugin_state().backend_plugin.get(name)


def failed_plugins() -> Iterable[PluginInfo]:
    """The plugins that failed to load, with their errors."""
    return (info for info in plugin_state().plugins.values() if info.error is not None)
