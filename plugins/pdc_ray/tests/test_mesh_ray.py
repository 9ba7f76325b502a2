"""A mesh of remote actors on a real local Ray (see conftest.py): one member per Ray
worker, the mesh's operations, and no worker left behind by the nursery's exit (the
``ray_cluster`` fixture checks it). Skipped when Ray is not installed."""

from __future__ import annotations

import os
from typing import Any

import anyio
import pdc_ray
import pytest

from pdc_core import Actor, ActorState, open_nursery

pytestmark = pytest.mark.usefixtures("ray_cluster")

LIMIT = 60


class Where(Actor[Any, Any]):
    async def handle(self, message: Any) -> Any:
        if message == "pid":
            return os.getpid()
        return message


async def test_a_mesh_of_ray_workers() -> None:
    with anyio.fail_after(LIMIT):
        async with pdc_ray.connect(), open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                Where, shape={"worker": 3}, placement=pdc_ray.on(num_cpus=0)
            )
            pids = await mesh.call("pid")
            assert len(set(pids)) == 3  # one process per member
            assert os.getpid() not in pids
            assert await mesh.scatter([1, 2, 3]) == [1, 2, 3]
            assert sorted(point for point, _ in [x async for x in mesh.stream("x")]) == [
                (0,),
                (1,),
                (2,),
            ]
            await mesh.stop()
            assert set(mesh.states.values()) == {ActorState.STOPPED}
