"""A persistent-kernel body that holds one batch until the test lets it go."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: How long a held batch waits at most: a failed test must not keep the worker thread.
LIMIT = 10


class HeldBatch:
    """``body``, but a batch with x == 1000 is a body that does not stop in time: it
    says it has the batch in hand (``entered``), then holds it until the test sets
    ``release`` (bounded by :data:`LIMIT`)."""

    def __init__(self, body: Callable[[Any], Any]) -> None:
        self.body = body
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, requests: Any) -> Any:
        if (requests["x"] == 1000).any():
            self.entered.set()
            self.release.wait(LIMIT)
        return self.body(requests)
