"""The errors pdc-ray adds to pdc's own.

All derive from :class:`pdc_core.PdcError`, so they pickle with every field (they cross
process boundaries) and ``except PdcError`` catches them.
"""

from __future__ import annotations

from pdc_core import PdcError

__all__ = ["PlacementTimeout", "RemoteActorLost", "RemoteError"]


class RemoteError(PdcError):
    """A remote exception that could not be brought back as itself.

    A remote actor's exception crosses the wire pickled. When it cannot be pickled
    there, or unpickled here (its class is not importable in this process, or its
    constructor does not accept its own ``args``), it arrives boxed as this error:
    ``type_name`` is the qualified name of the original class, ``message`` its
    ``str()``, and ``remote_traceback`` the traceback formatted where it was raised.
    """

    def __init__(self, type_name: str, message: str, remote_traceback: str) -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback


class RemoteActorLost(PdcError, ConnectionError):
    """The process (or node) hosting a remote actor is gone, or stopped answering.

    Raised as the ``cause`` of the :class:`~pdc_core.ActorCrashed` of an actor whose
    Ray worker died, was killed from outside, or missed its heartbeat. Requests that
    were in flight at that moment fail with that ``ActorCrashed``: whether the remote
    actor handled them is unknown (delivery is at most once).
    """


class PlacementTimeout(PdcError, TimeoutError):
    """A remote actor was not started within its placement's ``start_timeout``.

    Usually the cluster cannot satisfy the placement (no node has the requested
    CPUs, GPUs or custom resources free), which Ray would otherwise wait for forever.
    It arrives as the ``cause`` of ``ActorCrashed(... while starting)``; nothing is left
    behind in the cluster.
    """
