"""Loading: the plugins selected, each loaded in isolation, and what their hooks registered.

Plugins are found through the ``pdc`` entry-point group (:mod:`._discovery`), chosen
by ``PDC_PLUGINS`` (:mod:`._selection`) and checked (:mod:`._validation`); this module
loads them and calls their hooks. Each entry point names an object (usually a module)
carrying hook implementations marked with :data:`hookimpl`. Hooks are synchronous and
*register* things::

    from pdc_core.backend import hookimpl

    @hookimpl
    def pdc_register_backends(register):
        register(MyBackend)

Guarantees:

- Loading is lazy (the first time backends are needed, never at ``import pdc_core``),
  happens once (thread-safe) until :func:`forget_plugins`, and imports no lazily
  registered backend class (:class:`RegisteredBackend` imports it on first
  :meth:`~RegisteredBackend.load`).
- Loading is isolated: a plugin that fails to import, raises in a hook (``sys.exit()``
  included: every exception but :class:`KeyboardInterrupt` is contained), registers
  something invalid or returns a value from a ``register`` hook is recorded with its
  error and skipped. So is a plugin whose hook implementations do not fit pdc's hooks,
  before any of its hooks runs.
- Nothing is chosen silently: the names of the first-party plugins (``cpu``,
  ``cuda``, ``metal``, ``ray``) stay with their distributions, and a backend,
  placement or info section of that name from any other distribution is refused and
  reported on the claimant, whatever the load order; a name two plugins register is
  kept by one, and the other is reported.
- Every problem is both recorded on the plugin (:func:`failed_plugins`, ``pdc
  plugins``) and logged; a ``PDC_PLUGINS`` entry that selects nothing is warned about.

Floor: the top of the loading rooms (above :mod:`._discovery`, :mod:`._selection` and
:mod:`._validation`); only :mod:`._registry` and the package import it.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import traceback
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import pluggy

from .._backend._contract import Availability, Backend
from .._exceptions import PluginError
from ._discovery import PluginInfo, _Candidate, _discover
from ._hookspecs import PROJECT_NAME, LazyBackend, PdcHookSpecs
from ._selection import PluginSelection, _plan
from ._validation import (
    Registration,
    _argument_problems,
    _hook_problems,
    _invalid_hooks,
    _named_registration,
    _one_line,
    _reserved,
    _validate_backend,
    _validate_lazy,
)

__all__ = [
    "RegisteredBackend",
    "backend_registrations",
    "failed_plugins",
    "forget_plugins",
    "list_plugins",
    "plugin_info_of_backend",
    "plugin_of_backend",
    "plugin_selection",
    "plugin_state",
    "registered_backends",
    "registered_benchmarks",
    "registered_info_sections",
    "registered_placements",
]

_log = logging.getLogger("pdc.plugins")


class RegisteredBackend:
    """A backend a plugin registered: its class, or a :class:`LazyBackend` whose class
    is imported the first time :meth:`load` is called.

    :attr:`priority` and :meth:`availability` never import a lazily registered class,
    so ranking and probing cost only what the plugin's own probe costs.
    """

    def __init__(self, registration: type[Backend] | LazyBackend) -> None:
        self.registration = registration
        self.name: str = registration.name
        self.distribution: str = registration.distribution
        self._class = None if isinstance(registration, LazyBackend) else registration
        self._lock = threading.Lock()

    @property
    def priority(self) -> int:
        """Where the backend ranks when pdc picks the best one."""
        priority = self.registration.priority
        return priority() if callable(priority) else priority

    def availability(self) -> Availability:
        """The backend's own answer to whether it can run here (may raise)."""
        return self.registration.availability()

    @property
    def label(self) -> str:
        """What error messages call it: the class's name, or a lazy registration's target."""
        registration = self.registration
        if isinstance(registration, LazyBackend):
            return registration.target
        return registration.__qualname__

    @property
    def loaded(self) -> type[Backend] | None:
        """The class, if it is imported (always, for a class registered directly)."""
        return self._class

    def load(self) -> type[Backend]:
        """The class, imported on first call; raises what the import raises, and
        :class:`~pdc_core.PluginError` for a class that does not match its registration."""
        if self._class is None:
            with self._lock:
                if self._class is None:
                    self._class = self._import()
        return self._class

    def _import(self) -> type[Backend]:
        lazy = self.registration
        assert isinstance(lazy, LazyBackend)  # a class registered directly is loaded
        module, _, attribute = lazy.target.partition(":")
        found: object = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
        cls = _validate_backend(found)
        for field_name in ("name", "distribution"):
            if getattr(cls, field_name) != getattr(lazy, field_name):
                raise PluginError(
                    f"{lazy.target} has {field_name} {getattr(cls, field_name)!r}, but it "
                    f"was registered as LazyBackend({field_name}={getattr(lazy, field_name)!r})"
                )
        return cls


class _PluginState:
    """Loaded plugins and the backends they registered; built once, on demand."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(PROJECT_NAME)
        self.manager.add_hookspecs(PdcHookSpecs)
        #: By key (see :attr:`_Candidate.key`): unique even when names are shared.
        self.plugins: dict[str, PluginInfo] = {}
        self.backends: dict[str, RegisteredBackend] = {}
        self.backend_plugin: dict[str, str] = {}
        self.placements: dict[str, Registration] = {}
        self.info_sections: dict[str, Registration] = {}
        self.benchmarks: dict[str, Registration] = {}
        self.selection = PluginSelection()


_state: _PluginState | None = None
_lock = threading.Lock()


def _format_error(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).strip()
    if isinstance(exc, SystemExit):
        text += " (a plugin must not exit the process)"
    return text


def _load() -> _PluginState:
    state = _PluginState()
    candidates = _discover()
    plan = _plan(candidates, os.environ.get("PDC_PLUGINS"))
    state.selection = plan.selection
    for candidate in candidates:
        if candidate.key in plan.refused:
            state.plugins[candidate.key] = candidate.info(error=plan.refused[candidate.key])
        elif candidate in plan.load:
            _load_plugin(state, candidate)
    _call_register_hooks(state)
    _call_named_hooks(state, "pdc_register_placements", "placement", "placements")
    _call_named_hooks(state, "pdc_register_info", "info section", "info_sections")
    _call_named_hooks(state, "pdc_register_benchmarks", "benchmark", "benchmarks")
    if plan.warning is not None:
        warnings.warn(plan.warning, UserWarning, stacklevel=2)
    for info in state.plugins.values():
        if info.error is not None:
            _log.warning("pdc plugin %r (%s) skipped: %s", info.name, info.distribution, info.error)
    _log.debug("backends registered by plugins: %s", ", ".join(sorted(state.backends)) or "none")
    return state


def _load_plugin(state: _PluginState, candidate: _Candidate) -> None:
    info = candidate.info()
    state.plugins[candidate.key] = info
    try:
        plugin = candidate.entry_point.load()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a plugin must not end the process
        info.error = f"failed to load: {_format_error(exc)}"
        return
    try:
        state.manager.register(plugin, name=candidate.key)
    except pluggy.PluginValidationError as exc:  # an implementation's arguments, checked by pluggy
        info.error = _invalid_hooks(_argument_problems(state.manager, plugin) or [_one_line(exc)])
        return
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        info.error = f"failed to load: {_format_error(exc)}"
        return
    problems = _hook_problems(state.manager, plugin)
    try:
        # Every plugin registered before this one passed, so whatever pluggy finds
        # pending now (an implementation that matches no hook) belongs to this one.
        state.manager.check_pending()
    except pluggy.PluginValidationError as exc:
        problems = problems or [_one_line(exc)]
    if problems:
        state.manager.unregister(name=candidate.key)
        info.error = _invalid_hooks(problems)
        return
    info.hooks = sorted(caller.name for caller in state.manager.get_hookcallers(plugin) or ())


def _call_register_hooks(state: _PluginState) -> None:
    """Call each plugin's ``pdc_register_backends`` on its own, so one failure is contained.

    A backend named after a first-party plugin (``cpu``, ``cuda``, ``metal``, ``ray``)
    is accepted only from that plugin's distribution (:data:`KNOWN_DISTRIBUTIONS`),
    whatever order the plugins load in; from any other it is refused and reported on
    the claimant. When two plugins register a backend of any other name, the plugin
    from the distribution the backend class names in ``distribution`` keeps it (else
    the first plugin by name); the other is reported.
    """
    claims: dict[str, list[tuple[str, type[Backend] | LazyBackend]]] = {}
    impls = state.manager.hook.pdc_register_backends.get_hookimpls()
    for impl in sorted(
        impls, key=lambda impl: (state.plugins[impl.plugin_name].name, impl.plugin_name)
    ):
        info = state.plugins[impl.plugin_name]
        registered: list[type[Backend] | LazyBackend] = []
        try:
            returned = impl.function(register=registered.append)
            if returned is not None:
                raise PluginError(
                    f"pdc_register_backends returned {returned!r}; "
                    "it must call register(BackendClass) and return None"
                )
            for backend in registered:
                if isinstance(backend, LazyBackend):
                    _validate_lazy(backend)
                else:
                    _validate_backend(backend)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit too: a plugin must not end the process
            info.error = f"pdc_register_backends failed: {_format_error(exc)}"
            state.manager.unregister(name=impl.plugin_name)
            continue
        for backend in registered:
            squatting = _reserved(info, "backend", backend.name)
            if squatting is not None:
                info.error = squatting if info.error is None else f"{info.error}; {squatting}"
                continue
            claims.setdefault(backend.name, []).append((impl.plugin_name, backend))
    for name, candidates in claims.items():
        winner = next(
            (
                candidate
                for candidate in candidates
                if state.plugins[candidate[0]].distribution == candidate[1].distribution
            ),
            candidates[0],
        )
        for plugin_key, backend in candidates:
            if (plugin_key, backend) != winner:
                owner = state.plugins[winner[0]]
                state.plugins[plugin_key].error = (
                    f"registers backend {name!r}, which plugin {owner.name!r} "
                    f"({owner.distribution}) also registers; skipped"
                )
                continue
            state.backends[name] = RegisteredBackend(backend)
            state.backend_plugin[name] = plugin_key
            state.plugins[plugin_key].backends.append(name)


def _call_named_hooks(state: _PluginState, hook: str, kind: str, field_name: str) -> None:
    """Call each plugin's ``hook`` (``register(name, target, description)``) on its own,
    into the registry ``state.<field_name>`` (and ``PluginInfo.<field_name>``).

    A plugin whose hook raises, returns a value or registers something invalid gets
    the error recorded and registers nothing through that hook; a name already taken
    (by the plugin first by name) is refused with an error on the later plugin. The
    plugin's other registrations (its backends) stay.
    """
    caller = getattr(state.manager.hook, hook)
    registry: dict[str, Registration] = getattr(state, field_name)
    for impl in sorted(
        caller.get_hookimpls(),
        key=lambda impl: (state.plugins[impl.plugin_name].name, impl.plugin_name),
    ):
        info = state.plugins[impl.plugin_name]
        registered: list[Registration] = []

        def register(
            name: str,
            target: Callable[..., Any],
            description: str = "",
            *,
            _info: PluginInfo = info,
            _into: list[Registration] = registered,
        ) -> None:
            _into.append(_named_registration(kind, name, target, description, _info))

        try:
            returned = impl.function(register=register)
            if returned is not None:
                raise PluginError(
                    f"{hook} returned {returned!r}; it must call register(...) and return None"
                )
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit too: a plugin must not end the process
            failure = f"{hook} failed: {_format_error(exc)}"
            info.error = failure if info.error is None else f"{info.error}; {failure}"
            continue
        for registration in registered:
            squatting = _reserved(info, kind, registration.name)
            if squatting is not None:
                info.error = squatting if info.error is None else f"{info.error}; {squatting}"
                continue
            owner = registry.get(registration.name)
            if owner is not None:
                clash = (
                    f"registers {kind} {registration.name!r}, which plugin "
                    f"{owner.plugin.name!r} ({owner.plugin.distribution}) also registers; skipped"
                )
                info.error = clash if info.error is None else f"{info.error}; {clash}"
                continue
            registry[registration.name] = registration
            getattr(info, field_name).append(registration.name)


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
    """Every plugin found in the ``pdc`` entry-point group, loaded or not.

    Plugins that ``PDC_PLUGINS`` filters out are not listed (see
    :func:`plugin_selection`); refused claimants of a selected name are.
    """
    return sorted(
        plugin_state().plugins.values(),
        key=lambda info: (info.name.lower(), not info.loaded, info.distribution or ""),
    )


def backend_registrations() -> dict[str, RegisteredBackend]:
    """Backends registered by plugins, by name; imports no lazily registered class."""
    return dict(plugin_state().backends)


def registered_backends() -> dict[str, type[Backend]]:
    """Backend classes registered by plugins, by name, importing every lazily registered
    one (see :class:`LazyBackend`); raises what such an import raises."""
    return {name: entry.load() for name, entry in plugin_state().backends.items()}


def registered_placements() -> dict[str, Registration]:
    """Placements registered by plugins (``pdc demo --placement NAME``), by name."""
    return dict(plugin_state().placements)


def registered_info_sections() -> dict[str, Registration]:
    """``pdc info`` sections registered by plugins, by name."""
    return dict(plugin_state().info_sections)


def registered_benchmarks() -> dict[str, Registration]:
    """Backends' own ``pdc bench`` paths registered by plugins, by backend name."""
    return dict(plugin_state().benchmarks)


def plugin_of_backend(name: str) -> str | None:
    """The name of the plugin that registered the backend ``name``, if any."""
    info = plugin_info_of_backend(name)
    return info.name if info is not None else None


def plugin_info_of_backend(name: str) -> PluginInfo | None:
    """The plugin that registered the backend ``name``, if any."""
    state = plugin_state()
    key = state.backend_plugin.get(name)
    return state.plugins[key] if key is not None else None


def plugin_selection() -> PluginSelection:
    """What ``PDC_PLUGINS`` filtered out when the plugins were loaded."""
    return plugin_state().selection


def failed_plugins() -> Iterable[PluginInfo]:
    """The plugins that failed to load or were refused, with their errors."""
    return (info for info in plugin_state().plugins.values() if info.error is not None)
