"""The hooks a pdc plugin may implement, and the markers for them.

Plugins are found through the ``pdc`` entry-point group. Each entry point names an
object (usually a module) carrying hook implementations marked with :data:`hookimpl`.
Hooks are synchronous and *register* things::

    from pdc_core.backend import hookimpl

    @hookimpl
    def pdc_register_backends(register):
        register(MyBackend)

    @hookimpl
    def pdc_register_placements(register):
        register("ray", open_ray_placement, "a Ray worker process")

    @hookimpl
    def pdc_register_info(register):
        register("ray", ray_cluster_report, "the Ray cluster this machine can reach")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .._backend._contract import Backend

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "InfoReport",
    "OpenPlacement",
    "PdcHookSpecs",
    "hookimpl",
    "hookspec",
]

ENTRY_POINT_GROUP = "pdc"
PROJECT_NAME = "pdc"

#: What ``pdc_register_placements`` registers: called with no arguments, returns an
#: async context manager that yields a placement (what ``start_actor(placement=)``
#: takes) and holds what it needs (a cluster connection) until it exits.
OpenPlacement = Callable[[], AbstractAsyncContextManager[Any]]
#: What ``pdc_register_info`` registers: called by ``pdc info``, returns a JSON-ready
#: mapping (str keys; str, number, bool, None, list or nested mapping values).
InfoReport = Callable[[], Mapping[str, Any]]

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marks a function of a plugin as the implementation of a ``pdc_`` hook.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class PdcHookSpecs:
    """The hooks a pdc plugin may implement."""

    @hookspec
    def pdc_register_backends(self, register: Callable[[type[Backend]], None]) -> None:
        """Register backend classes by calling ``register(BackendSubclass)``.

        Called once per process, when backends are first needed. Must not import
        vendor libraries that may be missing; do that inside the backend's methods.
        """

    @hookspec
    def pdc_register_placements(self, register: Callable[[str, OpenPlacement, str], None]) -> None:
        """Register named placements by calling ``register(name, open, description)``.

        ``name`` is what ``pdc demo --placement NAME`` selects (a lower-case word such
        as ``"ray"``). ``open()`` is called when the placement is used and returns an
        async context manager (:data:`OpenPlacement`) that yields the placement object
        for ``start_actor(..., placement=...)`` and releases what it holds on exit.
        Registering must stay cheap: import heavy or optional libraries inside
        ``open``, never here.
        """

    @hookspec
    def pdc_register_info(self, register: Callable[[str, InfoReport, str], None]) -> None:
        """Register sections of ``pdc info`` by calling ``register(name, report, title)``.

        ``report()`` runs each time ``pdc info`` does and returns a JSON-ready mapping
        (:data:`InfoReport`), shown under ``title``; what it raises is shown as the
        section's error. It must not start anything (a cluster, a device context) just
        to describe it, and should answer within a few seconds.
        """
