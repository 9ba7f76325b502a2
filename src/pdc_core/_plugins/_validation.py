"""Validation: whether a plugin's hooks fit pdc's, and whether what they register is valid.

Two kinds of check, both run by the loader (:mod:`._loader`) before anything a plugin
offers is used:

- **Hooks**, before any of the plugin's hooks runs (:func:`_hook_problems`): a
  ``@hookimpl`` that matches no hook (a typo such as ``pdc_register_backend``: the
  problem names it and the nearest real hook), one marked as a wrapper, one whose
  arguments pdc cannot pass (pluggy's ``PluginValidationError``, made precise), and a
  function named after a hook but not marked ``@hookimpl``.
- **Registrations**, as the hooks register things: a backend class
  (:func:`_validate_backend`: a concrete :class:`~pdc_core.backend.Backend` subclass
  with a lower-case name and a distribution), a :class:`LazyBackend`
  (:func:`_validate_lazy`, without importing its class), a named registration
  (:func:`_named_registration`: placements, info sections, benchmarks), and a first-party
  name (``cpu``, ``cuda``, ``metal``, ``ray``) claimed by another distribution
  (:func:`_reserved`).

Guarantees: every check is pure. It calls no hook, imports no plugin code and changes
no state; a problem is returned as a sentence (hooks, reserved names) or raised as
:class:`~pdc_core.PluginError` naming the argument at fault (registrations), for the
loader to record on the plugin.

Floor: above :mod:`._discovery` (it reads :data:`KNOWN_DISTRIBUTIONS`); below
:mod:`._loader`.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pluggy

from .._backend._contract import Backend
from .._exceptions import PluginError
from ._discovery import KNOWN_DISTRIBUTIONS, PluginInfo, _normalize
from ._hookspecs import LazyBackend

__all__ = ["Registration"]


@dataclass(frozen=True)
class Registration:
    """A named thing a plugin registered through ``pdc_register_placements`` (``target``
    opens the placement), ``pdc_register_info`` (``target`` reports a section) or
    ``pdc_register_benchmarks`` (``target(backend)`` lists a backend's benchmark paths)."""

    name: str
    target: Callable[..., Any]
    description: str
    plugin: PluginInfo


def _hook_names(manager: pluggy.PluginManager) -> list[str]:
    """The hooks pdc defines (its hook specifications), sorted."""
    return sorted(
        name
        for name, caller in vars(manager.hook).items()
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
    manager: pluggy.PluginManager, plugin: object
) -> list[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """``(hook name, function, options)`` of each ``@hookimpl`` the plugin carries, as
    pluggy finds them (``specname`` honoured)."""
    found = []
    for attr in dir(plugin):
        opts = manager.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            continue
        function = getattr(plugin, attr, None)
        if callable(function):
            found.append((opts.get("specname") or attr, function, dict(opts)))
    return found


def _argument_problems(manager: pluggy.PluginManager, plugin: object) -> list[str]:
    """What is wrong with the arguments of the plugin's implementations of pdc's hooks."""
    hooks = set(_hook_names(manager))
    problems = []
    for hook, function, _ in _implementations(manager, plugin):
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


def _hook_problems(manager: pluggy.PluginManager, plugin: object) -> list[str]:
    """Implementations that match no hook of pdc, implementations pdc could not call,
    and functions named after a hook but not marked with ``@hookimpl``."""
    hooks = _hook_names(manager)
    problems = []
    for hook, _, opts in _implementations(manager, plugin):
        if hook not in hooks and not opts.get("optionalhook"):
            # (optionalhook=True is pluggy's way of implementing another plugin's hook.)
            problems.append(
                f"{hook} matches no pdc hook ({_nearest(hook, hooks)}pdc's hooks are "
                f"{', '.join(hooks)})"
            )
        elif hook in hooks and (opts.get("wrapper") or opts.get("hookwrapper")):
            problems.append(f"{hook} is marked as a wrapper, which pdc's hooks do not support")
    problems += _argument_problems(manager, plugin)
    for hook in hooks:
        function = getattr(plugin, hook, None)
        if callable(function) and manager.parse_hookimpl_opts(plugin, hook) is None:
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


_NAME = re.compile(r"[a-z][a-z0-9_-]*\Z")


def _named_registration(
    kind: str, name: object, target: object, description: object, plugin: PluginInfo
) -> Registration:
    """What ``register(name, target, description)`` of a named hook records for ``plugin``;
    :class:`~pdc_core.PluginError` for a bad name, target or description."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise PluginError(
            f"{kind} name {name!r} is invalid: it must be a lower-case word such as 'ray'"
        )
    if not callable(target):
        raise PluginError(f"{kind} {name!r}: {target!r} is not callable")
    if not isinstance(description, str):
        raise PluginError(f"{kind} {name!r}: description must be a str")
    return Registration(name, target, description, plugin)


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
