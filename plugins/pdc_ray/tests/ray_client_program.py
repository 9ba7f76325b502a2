"""A Ray Client program, run by test_ray_client.py in a process of its own:
``python ray_client_program.py ray://HOST:PORT`` connects through ``pdc_ray.connect`` to
the Ray Client server at that address and, under asyncio and then trio, runs remote
actors and a remote persistent kernel there; it prints one line ``RESULT <json>``.

Its actor and kernel are defined here, in ``__main__``: Ray Client ships them by value.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pdc_ray

from pdc_core import Actor, ActorCrashed, PersistentKernel, open_nursery

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


class Echo(Actor[Any, Any]):
    async def handle(self, message: Any) -> Any:
        if isinstance(message, BaseException):
            raise message
        if message == "pid":
            return os.getpid()
        if message == "sleep":
            await anyio.sleep(3600)
        return message


def double(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


DOUBLE = PersistentKernel("double", REQ, REP, capacity=256, bodies={"cpu": double})


async def session(address: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with pdc_ray.connect(address=address) as cluster:
        out["started"] = cluster.started
        out["cpus"] = cluster.resources().get("CPU")
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0))
            assert isinstance(ref, pdc_ray.RemoteActorRef)
            out["ask"] = await ref.ask(21)
            out["ask_many"] = await ref.ask_many(list(range(100))) == list(range(100))
            out["pid_differs"] = await ref.ask("pid") != os.getpid()
            out["located"] = ref.location is not None and ref.location.pid > 0
            kernel = await nursery.start_actor(
                DOUBLE, placement=pdc_ray.on(num_cpus=0, backend="cpu")
            )
            assert isinstance(kernel, pdc_ray.RemoteKernelRef)
            records = np.zeros(5000, REQ)  # 80 kB: its buffer travels beside the pickle
            records["id"] = np.arange(5000)
            records["x"] = np.arange(5000) * 0.5
            replies = await kernel.ask_batch(records)
            out["ask_batch"] = bool((replies["y"] == records["x"] * 2).all())
        try:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0))
                await ref.tell(LookupError("remote boom"))
                await anyio.sleep_forever()
        except ActorCrashed as exc:
            out["crash"] = f"{type(exc.cause).__name__}: {exc.cause}"
        with anyio.CancelScope() as scope:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0))
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ref.ask, "sleep")
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()
        out["cancelled"] = scope.cancelled_caught
    return out


def main() -> None:
    address = sys.argv[1]
    results = {
        backend: anyio.run(session, address, backend=backend) for backend in ("asyncio", "trio")
    }
    print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
