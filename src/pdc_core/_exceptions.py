"""The exception hierarchy of pdc.

Every exception pdc raises on purpose derives from :class:`PdcError`, and also from
the built-in exception a caller would naturally catch (``LookupError`` for a backend
that cannot be found, ``ValueError`` for misuse of a pool, ...), so code written
against the standard library's exceptions keeps working.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "CapabilityError",
    "PdcError",
    "PluginError",
    "PoolError",
    "PoolLimitError",
]


class PdcError(Exception):
    """Base class of every error raised by pdc."""


class PluginError(PdcError):
    """A plugin failed to load, or one of its hooks failed or returned garbage."""


class BackendError(PdcError):
    """A backend failed to do what it was asked."""


class BackendUnavailable(BackendError, LookupError):
    """A backend name is unknown, or names a backend that cannot run here.

    The message lists the installed backends, says why the requested one is not
    available and which distribution to ``pip install``.
    """


class CapabilityError(BackendError):
    """A backend was asked for something it declares it cannot do."""


class PoolError(PdcError, ValueError):
    """A buffer was released to a pool that did not hand it out, or released twice."""


class PoolLimitError(PdcError, MemoryError):
    """A pool with a byte limit cannot satisfy a request even after evicting free buffers."""
