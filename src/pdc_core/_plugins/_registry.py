"""Backend lookup by name, and the choice of the default backend.

Names are ``"<backend>"`` or ``"<backend>:<device index>"`` (``"cpu"``, ``"cuda"``,
``"cuda:1"``, ``"metal"``). Without a name, ``PDC_BACKEND`` decides; otherwise the
available backend with the highest priority wins (cuda > metal > cpu).

Choosing the default probes backends best first and stops at the first that can run,
so a backend ranked below it is never probed: a plugin whose probe imports a heavy
library (MLX, CuPy) costs nothing unless it could win. Priorities must therefore be
cheap to read (a class attribute, or a platform check); availability may cost more.
A backend registered as a :class:`~pdc_core.backend.LazyBackend` is ranked and probed
without importing its class; the class is imported (:func:`backend_class`) only when
the backend is chosen, listed in detail (:func:`available_backends`) or asked for its
devices.

A plugin's mistakes are contained to its own backend, each with a warning naming the
plugin: a priority function that raises or returns something other than an int makes
the backend unavailable (the reason says why) and the others are ranked as before; a
lazily registered backend that wins the ranking but whose class fails to import is
passed over for the next available one (asked for by name, it still raises its
:class:`~pdc_core.BackendError`).
"""

from __future__ import annotations

import numbers
import os
import threading
import warnings
from dataclasses import dataclass

from .._backend._contract import Availability, Backend, Capability, DeviceInfo
from .._exceptions import BackendError, BackendUnavailable, EnvironmentSettingError
from . import _loader
from ._discovery import KNOWN_DISTRIBUTIONS, PluginInfo, _normalize
from ._loader import RegisteredBackend, _format_error
from ._selection import _join

__all__ = [
    "CPU_INSTALL_HINT",
    "KNOWN_DISTRIBUTIONS",
    "BackendInfo",
    "available_backends",
    "backend_class",
    "backend_devices",
    "best_available",
    "check_environment",
    "default_backend_name",
    "get_backend",
    "no_backend_line",
    "parse_backend_name",
    "reload_plugins",
    "resolve_backend",
]


#: What to install where no backend can run (one line, true today and once released).
CPU_INSTALL_HINT = "pip install pdc-cpu (from a clone of pdc: pip install ./plugins/pdc_cpu)"


@dataclass(frozen=True)
class BackendInfo:
    """A registered backend and whether it can run here (``priority`` is ``None`` when
    the plugin's priority function failed; the backend is then unavailable)."""

    name: str
    distribution: str
    plugin: str | None
    priority: int | None
    availability: Availability
    capabilities: frozenset[Capability]


_instances: dict[tuple[str, int], Backend] = {}
_availability: dict[str, Availability] = {}
#: Each backend's priority, read once; ``None`` where the plugin's priority failed.
_ranks: dict[str, int | None] = {}
#: Why a backend's priority failed, by name (it is unavailable for that reason).
_rank_failures: dict[str, str] = {}
#: Backends passed over as the default because their class failed to import.
_passed_over: set[str] = set()
#: Settings (PDC_PLUGINS, PDC_BACKEND) already checked and found usable.
_checked: set[tuple[str | None, str | None]] = set()
_lock = threading.Lock()


def reload_plugins() -> None:
    """Forget loaded plugins so the next use rescans entry points and ``PDC_PLUGINS``.

    Backend instances already handed out stay valid; later lookups make new ones.
    """
    _loader.forget_plugins()
    with _lock:
        _instances.clear()
        _availability.clear()
        _ranks.clear()
        _rank_failures.clear()
        _passed_over.clear()
        _checked.clear()


def _rank(backend: RegisteredBackend) -> int | None:
    """The backend's priority, or ``None`` (with a warning, once) when reading it
    raises or gives something other than an int: like a failing probe, that makes only
    this backend unusable."""
    if backend.name in _ranks:
        return _ranks[backend.name]
    problem = None
    try:
        rank: int | None = backend.priority
        if isinstance(rank, numbers.Integral) and not isinstance(rank, bool):
            rank = int(rank)  # a NumPy integer too
        else:
            problem = f"priority() returned {rank!r} instead of an int"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a buggy plugin must not break ranking of the others
        problem = f"priority() raised {_format_error(exc)}"
    if problem is not None:
        rank = None
        _rank_failures[backend.name] = problem
        warnings.warn(
            f"the {backend.name} backend ({_origin(backend)}) is skipped: its {problem}",
            stacklevel=3,
        )
    _ranks[backend.name] = rank
    return rank


def _ranked() -> list[RegisteredBackend]:
    """Every registered backend, best first (a backend whose priority failed last)."""
    entries = list(_loader.backend_registrations().values())
    ranks = {entry.name: _rank(entry) for entry in entries}

    def key(entry: RegisteredBackend) -> tuple[bool, int, str]:
        rank = ranks[entry.name]
        return (rank is None, -(rank or 0), entry.name)

    return sorted(entries, key=key)


def _probe(backend: RegisteredBackend) -> Availability:
    cached = _availability.get(backend.name)
    if cached is None and _rank(backend) is None:
        cached = Availability.no(_rank_failures[backend.name])
        _availability[backend.name] = cached
    if cached is None:
        try:
            cached = backend.availability()
            if not isinstance(cached, Availability):
                cached = Availability.no(
                    f"availability() returned {cached!r} instead of an Availability"
                )
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a buggy plugin must not break lookup of the others
            cached = Availability.no(f"availability() raised {_format_error(exc)}")
        _availability[backend.name] = cached
    return cached


def _origin(backend: type[Backend] | RegisteredBackend) -> str:
    """``"CpuBackend, registered by plugin 'cpu' of pdc-cpu 0.2.0"``, for error messages."""
    entry = _loader.backend_registrations().get(backend.name)
    if isinstance(backend, RegisteredBackend):
        label, registered = backend.label, entry is backend
    else:
        label, registered = backend.__qualname__, entry is not None and entry.loaded is backend
    plugin = _loader.plugin_info_of_backend(backend.name) if registered else None
    if plugin is None:
        return f"{label}, from {backend.distribution}"
    dist = " ".join(part for part in (plugin.distribution, plugin.version) if part)
    origin = f"{label}, registered by plugin {plugin.name!r}"
    return f"{origin} of {dist}" if dist else origin


def _failure(
    backend: type[Backend] | RegisteredBackend, doing: str, call: str, exc: BaseException
) -> BackendError:
    return BackendError(
        f"the {backend.name} backend ({_origin(backend)}) failed {doing}: "
        f"{call} raised {_format_error(exc)}"
    )


def _load(entry: RegisteredBackend) -> type[Backend]:
    """The entry's class, with a failure to import it (or a mismatch) as a BackendError."""
    try:
        return entry.load()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise _failure(entry, "to import its class", f"importing {entry.label}", exc) from exc


def backend_class(name: str) -> type[Backend]:
    """The class of the registered backend ``name``, importing it if it was registered
    lazily. Raises :class:`KeyError` for an unknown name and
    :class:`~pdc_core.BackendError` (naming the backend and its plugin, chained to the
    cause) when the class cannot be imported or does not match its registration."""
    return _load(_loader.backend_registrations()[name])


def backend_devices(backend: type[Backend]) -> list[DeviceInfo]:
    """``backend.devices()``, with whatever it raises turned into a :class:`BackendError`.

    A :class:`~pdc_core.BackendError` (``BackendUnavailable`` included) passes through as
    the backend raised it; anything else but :class:`KeyboardInterrupt` (``SystemExit``
    included) becomes a ``BackendError`` naming the backend and its plugin, chained to it.
    """
    try:
        return list(backend.devices())
    except (KeyboardInterrupt, BackendError):
        raise
    except BaseException as exc:
        raise _failure(backend, "to list its devices", "devices()", exc) from exc


def _info(entry: RegisteredBackend) -> BackendInfo:
    availability = _probe(entry)
    try:
        capabilities = frozenset(_load(entry).capabilities)
    except BackendError as exc:  # listed as unusable, with why, rather than breaking the list
        availability = Availability.no(str(exc))
        capabilities = frozenset()
    return BackendInfo(
        name=entry.name,
        distribution=entry.distribution,
        plugin=_loader.plugin_of_backend(entry.name),
        priority=_rank(entry),
        availability=availability,
        capabilities=capabilities,
    )


def available_backends() -> list[BackendInfo]:
    """Every registered backend, best first, available or not. Imports the class of
    every lazily registered backend (for its capabilities); one that fails to import is
    listed as unavailable, with the error as the reason."""
    infos = [_info(entry) for entry in _ranked()]
    infos.sort(key=lambda info: not info.availability.available)  # stable: best first
    return infos


def _first_available(*, load: bool = True) -> str | None:
    """The name of the best backend that can run here, probing best first; ``None`` if none.

    With ``load``, the winner's class is imported when it was registered lazily (it is
    about to be used): one that fails to import is passed over, with a warning naming
    its plugin, for the next one. Without, nothing is imported (a check of settings).
    """
    for entry in _ranked():
        if entry.name in _passed_over or not _probe(entry).available:
            continue
        if load and entry.loaded is None:
            try:
                _load(entry)
            except BackendError as exc:
                _passed_over.add(entry.name)
                reason = " ".join(str(exc).split())
                warnings.warn(f"{reason}; the next available backend is the default", stacklevel=3)
                continue
        return entry.name
    return None


def best_available() -> str | None:
    """The name of the best backend that can run here, ``PDC_BACKEND`` aside (``None``
    if none can): the default once ``PDC_BACKEND`` is unset."""
    return _first_available()


def check_environment(*, backend: bool = True) -> None:
    """Check ``PDC_PLUGINS`` and (with ``backend``) ``PDC_BACKEND``; raise if either is unusable.

    Raises :class:`~pdc_core.EnvironmentSettingError` (one line: the variable, its value,
    the reason and the choices) when ``PDC_PLUGINS`` is blank, only commas, names no
    installed plugin, or (with ``backend`` and no ``PDC_BACKEND``) loads no backend that
    can run here; or when ``PDC_BACKEND`` is blank, malformed, names no installed
    backend, a backend that cannot run here or a device that does not exist. Unset and
    empty variables are fine. A setting found usable is not checked again until
    :func:`reload_plugins`.
    """
    plugins = os.environ.get("PDC_PLUGINS") or None
    chosen = (os.environ.get("PDC_BACKEND") or None) if backend else None
    key = (plugins, chosen)
    if key in _checked:
        return
    if plugins is not None:
        _check_plugins_setting(plugins, need_backend=backend and chosen is None)
    if chosen is not None:
        _check_backend_setting(chosen)
    _checked.add(key)


def _check_plugins_setting(raw: str, *, need_backend: bool) -> None:
    selection = _loader.plugin_selection()
    if selection.problem is not None:
        raise EnvironmentSettingError("PDC_PLUGINS", raw, selection.problem, selection.choices)
    if not need_backend or _first_available(load=False) is not None:
        return
    infos = available_backends()
    if infos:
        why = ", ".join(f"{info.name}: {info.availability.reason}" for info in infos)
        reason = f"no backend it loads can run here ({why})"
    else:
        reason = "it loads no backend"
    raise EnvironmentSettingError("PDC_PLUGINS", raw, reason, selection.choices)


def _check_backend_setting(raw: str) -> None:
    def fail(reason: str, choices: list[str] | None = None) -> EnvironmentSettingError:
        if choices is None:
            choices = [info.name for info in available_backends() if info.availability.available]
        return EnvironmentSettingError("PDC_BACKEND", raw, reason, choices)

    text = raw.strip().lower()
    if not text:
        raise fail("it is blank, so it names no backend")
    if "," in text:
        raise fail("it takes one backend name (PDC_PLUGINS takes a list)")
    try:
        base, index = parse_backend_name(text)
    except BackendUnavailable as exc:
        raise fail(str(exc).replace(f"invalid backend name {text!r}: ", "")) from None
    entry = _loader.backend_registrations().get(base)
    if entry is None:
        provider = _filtered_provider(base)
        owner = KNOWN_DISTRIBUTIONS.get(base) if base != "ray" else None
        refused = _refused_claimants(base)
        if provider is not None:
            why = f"PDC_PLUGINS filtered out the plugin {_plugin_label(provider)} that provides it"
        elif refused:
            why = _refused_line(base, refused)
        elif owner is not None:
            why = f"{owner} is not installed (pip install {owner})"
        else:
            why = "no installed plugin provides it"
        raise fail(f"no backend is named {base!r}: {why}")
    availability = _probe(entry)
    if not availability.available:
        raise fail(f"the {base} backend is unavailable here: {availability.reason}")
    try:
        devices = backend_devices(_load(entry))
    except BackendError as exc:
        raise fail(" ".join(str(exc).split())) from exc
    if index >= len(devices):
        raise fail(
            f"the {base} backend has no device {index} ({len(devices)} device(s))",
            [device.qualified_name for device in devices],
        )


def default_backend_name() -> str:
    """``PDC_BACKEND`` if set, else the best available backend's name.

    Raises :class:`~pdc_core.EnvironmentSettingError` when ``PDC_BACKEND`` or
    ``PDC_PLUGINS`` is unusable (see :func:`check_environment`), and
    :class:`~pdc_core.BackendUnavailable` when no backend is available.
    """
    check_environment()
    chosen = os.environ.get("PDC_BACKEND", "").strip()
    if chosen:
        return chosen.lower()
    best = _first_available()
    if best is None:
        raise BackendUnavailable(_no_backend_message())
    return best


def parse_backend_name(name: str) -> tuple[str, int]:
    """``"cuda:1"`` -> ``("cuda", 1)`` (device 0 without an index). Raises
    :class:`~pdc_core.BackendUnavailable` (one line) for a blank name or an index that
    is not a non-negative int (``"cpu:"``, ``"cpu:abc"``, ``"cpu:-1"``)."""
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
    what is installed, why the requested one is unavailable and what to install (or
    what ``PDC_PLUGINS`` filtered out). Without a name, raises its subclass
    :class:`~pdc_core.EnvironmentSettingError` (one line) when ``PDC_BACKEND`` or
    ``PDC_PLUGINS`` is unusable. Raises :class:`~pdc_core.BackendError`, naming the
    backend and its plugin and chained to the cause, when the backend's ``devices()``
    or constructor fails.
    """
    if name is None:
        check_environment()
        chosen = os.environ.get("PDC_BACKEND", "").strip()
        if chosen:
            return get_backend(chosen.lower())
    base, index = parse_backend_name(name if name is not None else default_backend_name())
    key = (base, index)
    instance = _instances.get(key)
    if instance is not None:
        return instance
    entry = _loader.backend_registrations().get(base)
    if entry is None:
        raise BackendUnavailable(_unknown_message(base))
    availability = _probe(entry)
    if not availability.available:
        raise BackendUnavailable(
            f"the {base} backend (from {entry.distribution}) is not available here: "
            f"{availability.reason}.\n{_installed_summary()}"
        )
    cls = _load(entry)
    devices = backend_devices(cls)
    if index >= len(devices):
        listing = ", ".join(f"{d.qualified_name} ({d.name})" for d in devices) or "none"
        raise BackendUnavailable(
            f"{base}:{index} does not exist: the {base} backend has {len(devices)} "
            f"device(s): {listing}"
        )
    with _lock:
        instance = _instances.get(key)
        if instance is None:
            try:
                instance = cls(device=index)
            except (KeyboardInterrupt, BackendError):
                raise
            except BaseException as exc:
                raise _failure(
                    cls, f"to start on device {index}", f"{cls.__qualname__}(device={index})", exc
                ) from exc
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
        if _loader.plugin_selection().filtered_out:
            return "No backend is loaded."
        return "No backend is installed."
    lines = ["Installed backends:"]
    for info in infos:
        state = "available" if info.availability.available else "unavailable"
        reason = f": {info.availability.reason}" if info.availability.reason else ""
        lines.append(f"  {info.name} ({info.distribution}) - {state}{reason}")
    return "\n".join(lines)


def _plugin_label(info: PluginInfo) -> str:
    dist = " ".join(part for part in (info.distribution, info.version) if part)
    return f"{info.name} ({dist})" if dist else info.name


def _failed_summary() -> str:
    failed = sorted(_loader.failed_plugins(), key=lambda info: (info.name, info.qualified_name))
    if not failed:
        return ""
    lines = ["Plugins that failed to load or were refused:"]
    lines += [f"  {_plugin_label(info)}: {info.error}" for info in failed]
    return "\n" + "\n".join(lines)


def _selection_summary() -> str:
    """What PDC_PLUGINS left out, when it is set."""
    selection = _loader.plugin_selection()
    if selection.raw is None:
        return ""
    lines = []
    if selection.filtered_out:
        left_out = ", ".join(_plugin_label(info) for info in selection.filtered_out)
        lines.append(f"PDC_PLUGINS={selection.raw!r} filtered out: {left_out}")
    if selection.unmatched:
        unmatched = ", ".join(repr(entry) for entry in selection.unmatched)
        lines.append(f"PDC_PLUGINS entries that select no installed plugin: {unmatched}")
    return "\n" + "\n".join(lines) if lines else ""


def _filtered_provider(base: str) -> PluginInfo | None:
    """The plugin PDC_PLUGINS filtered out that (probably) provides the backend ``base``."""
    owner = KNOWN_DISTRIBUTIONS.get(base)
    for info in _loader.plugin_selection().filtered_out:
        dist = _normalize(info.distribution) if info.distribution else None
        if info.name.lower() == base and (owner is None or dist == owner):
            return info
    return None


def _entry_for(info: PluginInfo) -> str:
    """The ``PDC_PLUGINS`` entry that selects the plugin ``info``."""
    name = info.name.lower()
    owner = KNOWN_DISTRIBUTIONS.get(name)
    dist = _normalize(info.distribution) if info.distribution else None
    if owner is not None:
        return name if dist == owner else info.qualified_name
    everyone = [*_loader.list_plugins(), *_loader.plugin_selection().filtered_out]
    claimants = {other.distribution for other in everyone if other.name.lower() == name}
    return name if len(claimants) == 1 else info.qualified_name


def _refused_claimants(base: str) -> list[PluginInfo]:
    """The plugins named ``base`` that were refused because several distributions
    provide that name (each might provide the backend ``base``)."""
    return sorted(
        (
            info
            for info in _loader.failed_plugins()
            if info.name.lower() == base and (info.error or "").startswith("refused: ")
        ),
        key=lambda info: info.qualified_name,
    )


def _resolving_setting(info: PluginInfo) -> str:
    """The ``PDC_PLUGINS`` value that loads ``info`` and keeps every plugin loaded now."""
    raw = _loader.plugin_selection().raw
    if raw is not None:
        entries = [entry.strip() for entry in raw.split(",") if entry.strip()]
    else:
        entries = [_entry_for(other) for other in _loader.list_plugins() if other.loaded]
    entries = [entry for entry in entries if entry.lower() != info.name.lower()]
    return ",".join([*entries, info.qualified_name])


def _refused_line(base: str, refused: list[PluginInfo]) -> str:
    """Why no plugin provides ``base``: its claimants were refused, by whom, and the
    PDC_PLUGINS value that loads each."""
    fixes = " or ".join(f"PDC_PLUGINS={_resolving_setting(info)!r}" for info in refused)
    if len(refused) == 1:
        why = (refused[0].error or "").removeprefix("refused: ").split(". ")[0]
        return f"pdc refused the plugin {base!r} ({why}); set {fixes} to load it"
    dists = _join([info.distribution or "an unknown distribution" for info in refused])
    return (
        f"pdc refused the plugin {base!r}: {dists} {'both' if len(refused) == 2 else 'all'} "
        f"provide it, and pdc does not choose between them; set {fixes} to load one"
    )


def _unknown_message(base: str) -> str:
    details = f"{_installed_summary()}{_failed_summary()}{_selection_summary()}"
    provider = _filtered_provider(base)
    raw = _loader.plugin_selection().raw
    refused = _refused_claimants(base)
    if provider is None and refused:
        return f"unknown backend {base!r}: {_refused_line(base, refused)}.\n{details}"
    if provider is not None:
        owner = KNOWN_DISTRIBUTIONS.get(base)
        where = (
            f"{provider.distribution} is installed (no need to pip install {owner}), "
            f"but PDC_PLUGINS={raw!r} filtered out its plugin {provider.name!r}"
            if owner is not None
            else f"PDC_PLUGINS={raw!r} filtered out the installed plugin "
            f"{_plugin_label(provider)}, which probably provides it"
        )
        return (
            f"unknown backend {base!r}: {where}. Add {_entry_for(provider)} to "
            f"PDC_PLUGINS, or unset PDC_PLUGINS.\n{details}"
        )
    hint = KNOWN_DISTRIBUTIONS.get(base) if base != "ray" else None  # pdc-ray: no backend
    install = (
        f" Install it with: pip install {hint}"
        if hint
        else " No known distribution provides it; check the name."
    )
    return f"unknown backend {base!r}.{install}\n{details}"


def _no_backend_message() -> str:
    details = f"{_installed_summary()}{_failed_summary()}{_selection_summary()}"
    selection = _loader.plugin_selection()
    if selection.filtered_out:
        return (
            f"no pdc backend is available with PDC_PLUGINS={selection.raw!r}: add an "
            f"installed backend's plugin to PDC_PLUGINS, or unset PDC_PLUGINS.\n{details}"
        )
    return f"{no_backend_line()}\n{details}"


def no_backend_line() -> str:
    """One line for a machine where no installed backend can run: which cannot and why,
    and exactly what to install (the cpu backend runs everywhere)."""
    infos = available_backends()
    why = "; ".join(f"{i.name} ({i.distribution}): {i.availability.reason}" for i in infos)
    where = f" ({why})" if why else " (none is installed)"
    return f"no pdc backend can run here{where}. Install the cpu backend: {CPU_INSTALL_HINT}"
