"""The hooks a pdc plugin may implement, and the markers for them.

Plugins are found through the ``pdc`` entry-point group. Each entry point names an
object (usually a module) carrying hook implementations marked with :data:`hookimpl`.
Hooks are synchronous and *register* things::

    from pdc_core.backend import hookimpl

    @hookimpl
    def pdc_register_backends(register):
        register(MyBackend)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .._backend._contract import Backend

__all__ = ["ENTRY_POINT_GROUP", "PROJECT_NAME", "PdcHookSpecs", "hookimpl", "hookspec"]

ENTRY_POINT_GROUP = "pdc"
PROJECT_NAME = "pdc"

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
