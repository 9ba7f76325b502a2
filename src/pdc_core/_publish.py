"""Give exported names their public address (as trio's ``fixup_module_metadata`` does).

Classes and functions are defined in private modules; once a public module exports
them, their ``__module__`` names it instead, so reprs, tracebacks, docs and pickles
say ``pdc_core.ActorCrashed`` rather than ``pdc_core._exceptions.ActorCrashed``.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import FunctionType
from typing import Any

__all__ = ["publish"]


def _is_private(module: object) -> bool:
    return isinstance(module, str) and any(part.startswith("_") for part in module.split("."))


def publish(module_name: str, namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Set ``__module__`` to ``module_name`` on each of ``names`` still at a private path.

    A name exported by several public modules keeps the first that published it; the
    methods of a published class follow it.
    """
    for name in names:
        obj = namespace[name]
        if not _is_private(getattr(obj, "__module__", None)) or not hasattr(obj, "__qualname__"):
            continue
        if getattr(obj, "__name__", name) != name:  # an alias (RingKernelMessage = Message)
            continue
        obj.__module__ = module_name
        if isinstance(obj, type):
            for member in vars(obj).values():
                function = getattr(member, "__func__", member)
                if isinstance(function, FunctionType) and _is_private(function.__module__):
                    function.__module__ = module_name
