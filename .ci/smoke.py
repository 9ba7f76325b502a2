"""Smoke test of the installed wheels (run by .ci/check-dists in a fresh venv).

Runs outside the repository, so every import comes from the installed wheels: an actor
answers an ask, and a persistent kernel resident on the cpu backend answers an ask and
a batch, under each async library given on the command line.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import anyio
import numpy as np
import pdc_cpu

import pdc_core
from pdc_core import PersistentKernel, PersistentKernelActor, open_nursery

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


def double_batch(requests: np.ndarray) -> np.ndarray:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


async def double(message: int) -> int:
    return 2 * message


async def main() -> None:
    kernel = PersistentKernel("smoke_doubler", REQ, REP, capacity=64, bodies={"cpu": double_batch})
    with anyio.fail_after(30):
        async with open_nursery() as nursery:
            actor = await nursery.start_actor(double)
            assert await actor.ask(21) == 42
            resident = await nursery.start_actor(PersistentKernelActor(kernel, "cpu"))
            reply = await resident.ask((7, 1.5))
            assert int(reply["id"]) == 7, reply
            assert float(reply["y"]) == 3.0, reply
            requests = np.zeros(100, REQ)
            requests["id"] = np.arange(100)
            requests["x"] = np.arange(100)
            replies = await resident.ask_batch(requests)
            assert list(replies["y"]) == [2.0 * i for i in range(100)], replies


if __name__ == "__main__":
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for module in (pdc_core, pdc_cpu):
        where = Path(module.__file__ or "").resolve()
        assert where.is_relative_to(site), f"{module.__name__} imported from {where}, not {site}"
    for backend in sys.argv[1:] or ["asyncio"]:
        anyio.run(main, backend=backend)
        print(f"smoke test passed under {backend}: an actor and a persistent kernel on cpu")
