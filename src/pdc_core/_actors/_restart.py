"""The restart policy of a supervised actor (what ``start_actor(..., restart=...)`` takes).

Below the nursery, so that what passes a policy on (a mesh's members) need not know the
nursery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._loop import strict_int

__all__ = ["RestartPolicy"]


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Supervise an actor by restarting it when it crashes.

    The actor is restarted after ``backoff`` seconds, doubling (``backoff_factor``) with
    each restart counted in the window, up to ``max_backoff``. When it would be the
    ``max_restarts + 1``-th restart within ``within`` seconds, the crash is escalated:
    the nursery raises :class:`~pdc_core.ActorCrashed` as if there were no policy.
    The request being handled when the actor crashed fails with
    :class:`~pdc_core.ActorCrashed`; the ones still queued are handled by the new
    incarnation.
    """

    max_restarts: int = 3
    within: float = 60.0
    backoff: float = 0.01
    backoff_factor: float = 2.0
    max_backoff: float = 1.0

    def __post_init__(self) -> None:
        # NumPy integers too, by the one integer rule (kept as an int)
        object.__setattr__(self, "max_restarts", strict_int(self.max_restarts, "max_restarts"))
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        for name in ("within", "backoff", "backoff_factor", "max_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number of seconds, not {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value!r}")
        if self.within <= 0:
            raise ValueError(f"within must be > 0 seconds, got {self.within}")
        if self.backoff < 0 or self.max_backoff < 0 or self.backoff_factor < 1:
            raise ValueError("backoff and max_backoff must be >= 0, backoff_factor >= 1")

    def delay(self, restarts: int) -> float:
        """Seconds to wait before the ``restarts``-th restart of the current window."""
        exponent = max(0, restarts - 1)
        return float(min(self.max_backoff, self.backoff * self.backoff_factor**exponent))
