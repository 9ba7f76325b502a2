"""A persistent kernel running the handle kit's echo (shared by the kernel-actor and the
seed-facade handle suites)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pdc_core import PersistentKernel
from pdc_core.testing import Echo

#: Requests and replies: one integer, the echoed value.
RECORD = np.dtype([("v", "<i8")])


class EchoBody:
    """A kernel body that replies to each record with its value, through the echo named
    ``key`` (found again after pickling, in the same interpreter)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, requests: Any) -> Any:
        echo = Echo.named(self.key)
        replies = np.empty(len(requests), RECORD)
        replies["v"] = [echo.handle(int(v)) for v in requests["v"]]
        return replies


def echo_kernel(echo: Echo) -> PersistentKernel:
    """A CPU persistent kernel running ``echo`` (it holds on the kit's held value, on
    its worker thread)."""
    name = f"echo_{echo.key.replace('-', '_')}"
    return PersistentKernel(name, RECORD, RECORD, bodies={"cpu": EchoBody(echo.key)})
