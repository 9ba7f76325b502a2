"""Plugin discovery: the ``pdc`` entry points, loaded lazily, each in isolation.

Plugins are found through the ``pdc`` entry-point group. Each entry point names an
object (usually a module) carrying hook implementations marked with
:data:`hookimpl`. Hooks are synchronous and *register* things::

    from pdc_core.backend import hookimpl

    @hookimpl
    def pdc_register_backends(register):
        register(MyBackend)

Loading is lazy (the first time backends are needed, never at ``import pdc_core``)
and isolated: a plugin that fails to import, raises (``sys.exit()`` included: every
exception but :class:`KeyboardInterrupt` is contained) in a hook, registers something
that is not a backend or returns a value from a ``register`` hook is recorded with
its error and skipped. So is a plugin whose hook implementations do not fit pdc's
hooks, before any of its hooks runs: a ``@hookimpl`` that matches no hook (a typo such
as ``pdc_register_backend``: the error names it and the nearest real hook), one whose
arguments pdc cannot pass (pluggy's ``PluginValidationError``, made precise), or a
function named after a hook but not marked ``@hookimpl``.

The names of the first-party plugins (``cpu``, ``cuda``, ``metal``, ``ray``) stay
with their distributions: a backend, placement or info section of that name from any
other distribution is refused and reported on the claimant, whatever the load order.

Plugins are identified by distribution and entry-point name. Two distributions that
provide the same entry-point name are never chosen between silently: the first-party
distribution of a name (:data:`KNOWN_DISTRIBUTIONS`) keeps it, and otherwise neither
is loaded; the refused claimants are reported. ``PDC_PLUGINS=cpu,cuda`` loads only the
selected plugins: a plain name selects the first-party plugin of that name (``cpu``
is pdc-cpu's ``cpu``) or the only distribution's entry point of that name, and
``dist:name`` (``pdc-thirdparty:thirdparty``) selects exactly one distribution's.
Names are case-insensitive; entries that select nothing are warned about.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import logging
import os
import re
import threading
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy

from .._backend._contract import Availability, Backend
from .._exceptions import PluginError
from ._hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME, LazyBackend, PdcHookSpecs

__all__ = [
    "KNOWN_DISTRIBUTIONS",
    "PluginInfo",
    "PluginSelection",
    "RegisteredBackend",
    "Registration",
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

#: The first-party plugins: entry-point name -> the distribution that owns it. In
#: ``PDC_PLUGINS`` a plain ``cpu`` means pdc-cpu's ``cpu`` entry point, and another
#: distribution's ``cpu`` entry point never replaces it. The same names are reserved
#: for what plugins register: only pdc-cpu may register a backend (or a placement, or
#: an info section) called ``cpu``, whatever order the entry points load in; another
#: distribution's claim is refused and reported on its plugin. Also the "pip install"
#: hints.
KNOWN_DISTRIBUTIONS = {
    "cpu": "pdc-cpu",
    "cuda": "pdc-cuda",
    "metal": "pdc-metal",
    "ray": "pdc-ray",
}


@dataclass
class PluginInfo:
    """What ``pdc plugins`` shows about one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    hooks: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    placements: list[str] = field(default_factory=list)
    info_sections: list[str] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def loaded(self) -> bool:
        """Whether the plugin loaded and registered without error (:attr:`error` is ``None``)."""
        return self.error is None

    @property
    def qualified_name(self) -> str:
        """``"<distribution>:<name>"``, which selects exactly this plugin in ``PDC_PLUGINS``."""
        return f"{self.distribution}:{self.name}" if self.distribution else self.name


@dataclass(frozen=True)
class Registration:
    """A named thing a plugin registered through ``pdc_register_placements`` (``target``
    opens the placement), ``pdc_register_info`` (``target`` reports a section) or
    ``pdc_register_benchmarks`` (``target(backend)`` lists a backend's benchmark paths)."""

    name: str
    target: Callable[..., Any]
    description: str
    plugin: PluginInfo


@dataclass(frozen=True)
class PluginSelection:
    """What ``PDC_PLUGINS`` did: ``raw`` is its value (``None`` when unset or blank),
    ``filtered_out`` the installed plugins it left out (not loaded, not listed),
    ``unmatched`` its entries that select no installed plugin, ``problem`` what is
    wrong with it (``None`` when nothing is) and ``choices`` the entries that select
    each installed plugin."""

    raw: str | None = None
    filtered_out: tuple[PluginInfo, ...] = ()
    unmatched: tuple[str, ...] = ()
    problem: str | None = None
    choices: tuple[str, ...] = ()


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


def _normalize(distribution: str) -> str:
    """The PEP 503 form of a distribution name: ``PDC_Thirdparty`` -> ``pdc-thirdparty``."""
    return re.sub(r"[-_.]+", "-", distribution).strip().lower()


def _format_error(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).strip()
    if isinstance(exc, SystemExit):
        text += " (a plugin must not exit the process)"
    return text


@dataclass(frozen=True, eq=False)
class _Candidate:
    """One installed ``pdc`` entry point, before it is loaded."""

    entry_point: importlib.metadata.EntryPoint
    distribution: str | None
    version: str | None

    @property
    def name(self) -> str:
        return self.entry_point.name

    @property
    def lower_name(self) -> str:
        return self.entry_point.name.lower()

    @property
    def normalized_distribution(self) -> str | None:
        return _normalize(self.distribution) if self.distribution is not None else None

    @property
    def key(self) -> str:
        dist = self.normalized_distribution
        return f"{dist}:{self.lower_name}" if dist is not None else self.lower_name

    @property
    def qualified_name(self) -> str:
        return f"{self.distribution}:{self.name}" if self.distribution else self.name

    @property
    def first_party(self) -> bool:
        owner = KNOWN_DISTRIBUTIONS.get(self.lower_name)
        return owner is not None and owner == self.normalized_distribution

    def info(self, error: str | None = None) -> PluginInfo:
        return PluginInfo(
            name=self.name, distribution=self.distribution, version=self.version, error=error
        )


def _discover() -> list[_Candidate]:
    """The installed entry points, once per (distribution, name)."""
    found: dict[str, _Candidate] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = entry_point.dist
        candidate = _Candidate(
            entry_point=entry_point,
            distribution=dist.name if dist is not None else None,
            version=dist.version if dist is not None else None,
        )
        found.setdefault(candidate.key, candidate)  # the same distribution twice on sys.path
    return list(found.values())


@dataclass
class _Plan:
    """Which candidates to load, which to report as refused, and what PDC_PLUGINS did."""

    load: list[_Candidate]
    refused: dict[str, str]
    selection: PluginSelection
    warning: str | None = None


def _join(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _distributions(group: Iterable[_Candidate]) -> list[str]:
    return sorted({c.distribution or "an unknown distribution" for c in group})


def _refusal(
    candidate: _Candidate, group: list[_Candidate], loaded: list[_Candidate], *, asked: bool
) -> str:
    """Why ``candidate`` is not loaded: another distribution claims its name, or (``asked``)
    a plain first-party name in ``PDC_PLUGINS`` means the first-party plugin only."""
    name = candidate.lower_name
    dists = _distributions(group)
    owner = KNOWN_DISTRIBUTIONS.get(name)
    if len(dists) == 1:
        claim = f"{dists[0]} provides a pdc entry point named {name!r}"
    else:
        claim = f"{_join(dists)} {'both' if len(dists) == 2 else 'all'} provide"
        claim += f" a pdc entry point named {name!r}"
    this = candidate.qualified_name
    if owner is not None and any(c.first_party for c in loaded):
        return (
            f"refused: {claim}; {owner} is its first-party owner, so only {owner}:{name} "
            f"is loaded. Name this one {this} in PDC_PLUGINS to load it instead"
        )
    if owner is not None and asked:
        return (
            f"refused: {claim}, but {name!r} in PDC_PLUGINS selects only the first-party "
            f"{owner}:{name}, which is not installed. Name this one {this} in PDC_PLUGINS "
            "to load it"
        )
    choices = " or ".join(sorted(c.qualified_name for c in group))
    return (
        f"refused: {claim}, so none is loaded rather than one chosen at random. "
        f"Name one in PDC_PLUGINS to load it: {choices}"
    )


def _selector(candidate: _Candidate, groups: dict[str, list[_Candidate]]) -> str:
    """The shortest PDC_PLUGINS entry that selects ``candidate``."""
    group = groups[candidate.lower_name]
    if candidate.first_party:
        return candidate.lower_name
    if candidate.lower_name not in KNOWN_DISTRIBUTIONS and len(_distributions(group)) == 1:
        return candidate.lower_name
    return candidate.qualified_name


def _parse_selection(raw: str) -> list[str]:
    entries: list[str] = []
    for entry in raw.split(","):
        entry = entry.strip().lower()
        if entry and entry not in entries:
            entries.append(entry)
    return entries


def _plan(candidates: list[_Candidate], raw_selection: str | None) -> _Plan:
    """Decide what to load from the candidates and ``PDC_PLUGINS`` (``raw_selection``)."""
    groups: dict[str, list[_Candidate]] = {}
    for candidate in candidates:
        groups.setdefault(candidate.lower_name, []).append(candidate)
    raw = (raw_selection or "").strip()
    selectors = tuple(sorted({_selector(c, groups) for c in candidates}))
    if not raw:
        # Everything, except names claimed by several distributions: there the
        # first-party owner keeps the name, and otherwise no claimant is loaded.
        load: list[_Candidate] = []
        refused: dict[str, str] = {}
        for group in groups.values():
            if len(_distributions(group)) == 1:
                load += group
                continue
            kept = [c for c in group if c.first_party]
            load += kept
            for candidate in group:
                if candidate not in kept:
                    refused[candidate.key] = _refusal(candidate, group, kept, asked=False)
        blank = None if not raw_selection else "it is blank, so it names no plugin"
        return _Plan(
            load=load,
            refused=refused,
            selection=PluginSelection(problem=blank, choices=selectors),
        )

    if not _parse_selection(raw):
        return _Plan(
            load=[],
            refused={},
            selection=PluginSelection(
                raw=raw,
                filtered_out=tuple(c.info() for c in candidates),
                problem="it names no plugin (only commas and blanks)",
                choices=selectors,
            ),
        )
    chosen: list[_Candidate] = []
    asked: list[str] = []  # plain names, whose other claimants are reported as refused
    unknown: list[str] = []
    ambiguous: list[str] = []
    for entry in _parse_selection(raw):
        dist, sep, name = entry.partition(":")
        if sep:
            matches = [
                c
                for c in candidates
                if c.normalized_distribution == _normalize(dist) and c.lower_name == name.strip()
            ]
            if not matches:
                unknown.append(entry)
        else:
            group = groups.get(entry, [])
            asked.append(entry)
            if entry in KNOWN_DISTRIBUTIONS:  # known even where its distribution is missing
                matches = [c for c in group if c.first_party]
            elif len(_distributions(group)) > 1:
                matches = []
                ambiguous.append(entry)
            else:
                matches = group
                if not matches:
                    unknown.append(entry)
        chosen += [c for c in matches if c not in chosen]
    refused = {}
    for name in asked:
        group = groups.get(name, [])
        loaded = [c for c in group if c in chosen]
        for candidate in group:
            if candidate not in chosen:
                refused[candidate.key] = _refusal(candidate, group, loaded, asked=True)
    filtered_out = tuple(
        c.info()
        for c in sorted(candidates, key=lambda c: (c.lower_name, c.key))
        if c not in chosen and c.key not in refused
    )
    problems = []
    if unknown:
        problems.append(
            "no installed plugin is named " + ", ".join(repr(entry) for entry in unknown)
        )
    for name in ambiguous:
        choices = " or ".join(sorted(c.qualified_name for c in groups[name]))
        problems.append(f"{name!r} is provided by several distributions; name one: {choices}")
    warning = None
    if problems:
        warning = (
            f"PDC_PLUGINS={raw!r}: {'; '.join(problems)}. "
            f"Installed plugins: {', '.join(selectors) or 'none'}"
        )
    return _Plan(
        load=chosen,
        refused=refused,
        selection=PluginSelection(
            raw=raw,
            filtered_out=filtered_out,
            unmatched=tuple(unknown + ambiguous),
            problem="; ".join(problems) or None,
            choices=selectors,
        ),
        warning=warning,
    )


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
        info.error = _invalid_hooks(_argument_problems(state, plugin) or [_one_line(exc)])
        return
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        info.error = f"failed to load: {_format_error(exc)}"
        return
    problems = _hook_problems(state, plugin)
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


def _hook_names(state: _PluginState) -> list[str]:
    """The hooks pdc defines (its hook specifications), sorted."""
    return sorted(
        name
        for name, caller in vars(state.manager.hook).items()
        if not name.startswith("_") and caller.has_spec()
    )


def _invalid_hooks(problems: list[str]) -> str:
    return "invalid hook implementation: " + "; ".join(problems) + "; the plugin is not loaded"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _nearest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""


def _signature(function: Callable[..., Any]) -> str:
    try:
        return f"{function.__name__}{inspect.signature(function)}"
    except (TypeError, ValueError):
        return getattr(function, "__name__", repr(function))


def _implementations(
    state: _PluginState, plugin: object
) -> list[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """``(hook name, function, options)`` of each ``@hookimpl`` the plugin carries, as
    pluggy finds them (``specname`` honoured)."""
    found = []
    for attr in dir(plugin):
        opts = state.manager.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            continue
        function = getattr(plugin, attr, None)
        if callable(function):
            found.append((opts.get("specname") or attr, function, dict(opts)))
    return found


def _argument_problems(state: _PluginState, plugin: object) -> list[str]:
    """What is wrong with the arguments of the plugin's implementations of pdc's hooks."""
    hooks = set(_hook_names(state))
    problems = []
    for hook, function, _ in _implementations(state, plugin):
        if hook not in hooks:
            continue
        try:
            inspect.signature(function).bind(register=None)
        except TypeError:
            problems.append(
                f"{_signature(function)} does not match the hook {hook}(register): pdc calls "
                "it with the one argument 'register'"
            )
        except ValueError:  # no signature to inspect (a builtin): pluggy accepted it
            continue
    return problems


def _hook_problems(state: _PluginState, plugin: object) -> list[str]:
    """Implementations that match no hook of pdc, implementations pdc could not call,
    and functions named after a hook but not marked with ``@hookimpl``."""
    hooks = _hook_names(state)
    problems = []
    for hook, _, opts in _implementations(state, plugin):
        if hook not in hooks and not opts.get("optionalhook"):
            # (optionalhook=True is pluggy's way of implementing another plugin's hook.)
            problems.append(
                f"{hook} matches no pdc hook ({_nearest(hook, hooks)}pdc's hooks are "
                f"{', '.join(hooks)})"
            )
        elif hook in hooks and (opts.get("wrapper") or opts.get("hookwrapper")):
            problems.append(f"{hook} is marked as a wrapper, which pdc's hooks do not support")
    problems += _argument_problems(state, plugin)
    for hook in hooks:
        function = getattr(plugin, hook, None)
        if callable(function) and state.manager.parse_hookimpl_opts(plugin, hook) is None:
            problems.append(
                f"{hook} is not marked with @hookimpl (from pdc_core.backend import hookimpl), "
                "so pdc would never call it"
            )
    return problems


def _reserved(info: PluginInfo, kind: str, name: str) -> str | None:
    """Why ``info`` may not register ``name``: it is a first-party name (cpu, cuda,
    metal, ray) and ``info`` is not that name's first-party distribution."""
    owner = KNOWN_DISTRIBUTIONS.get(name)
    if owner is None:
        return None
    if info.distribution is not None and _normalize(info.distribution) == owner:
        return None
    claimant = info.distribution or "a plugin of no known distribution"
    return (
        f"refused {kind} {name!r}: {claimant} registers it, but {name!r} is reserved for "
        f"the first-party {owner}; a third-party {kind} needs a name of its own"
    )


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


_NAME = re.compile(r"[a-z][a-z0-9_-]*\Z")


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
            if not isinstance(name, str) or not _NAME.match(name):
                raise PluginError(
                    f"{kind} name {name!r} is invalid: it must be a lower-case word such as 'ray'"
                )
            if not callable(target):
                raise PluginError(f"{kind} {name!r}: {target!r} is not callable")
            if not isinstance(description, str):
                raise PluginError(f"{kind} {name!r}: description must be a str")
            _into.append(Registration(name, target, description, _info))

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


def _validate_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise PluginError(
            f"{what} has an invalid name {name!r}: it must be a lower-case identifier such as "
            "'cuda'"
        )


def _validate_lazy(lazy: LazyBackend) -> None:
    what = f"LazyBackend({lazy.name!r})"
    _validate_name(what, lazy.name)
    if not isinstance(lazy.distribution, str) or not lazy.distribution:
        raise PluginError(f"{what} needs a distribution (a str such as 'pdc-cuda')")
    module, sep, attribute = (
        lazy.target.partition(":") if isinstance(lazy.target, str) else ("", "", "")
    )
    if not (sep and module and attribute):
        raise PluginError(
            f"{what} has target {lazy.target!r}: it must be 'module:ClassName', "
            "as in 'pdc_mine.backend:MineBackend'"
        )
    priority = lazy.priority
    if not (callable(priority) or (isinstance(priority, int) and not isinstance(priority, bool))):
        raise PluginError(f"{what} has priority {priority!r}: it must be an int or a function")
    if not callable(lazy.availability):
        raise PluginError(f"{what} has availability {lazy.availability!r}: it must be a function")


def _validate_backend(backend: object) -> type[Backend]:
    if not (isinstance(backend, type) and issubclass(backend, Backend)):
        raise PluginError(
            f"register() was given {backend!r}, which is not a subclass of "
            "pdc_core.backend.Backend (nor a pdc_core.backend.LazyBackend)"
        )
    _validate_name(f"backend class {backend.__qualname__}", getattr(backend, "name", None))
    if not isinstance(getattr(backend, "distribution", None), str):
        raise PluginError(f"backend class {backend.__qualname__} does not set 'distribution'")
    if getattr(backend, "__abstractmethods__", None):
        missing = ", ".join(sorted(backend.__abstractmethods__))
        raise PluginError(f"backend class {backend.__qualname__} does not implement: {missing}")
    return backend


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
