"""pdc-ray on a real local Ray (see conftest.py): one Ray per session, nothing left
behind after any test. Skipped when Ray is not installed."""

# ruff: noqa: PT012

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import anyio
import pdc_ray
import pytest

from pdc_core import Actor, ActorCrashed, ActorState, RestartPolicy, open_nursery

pytestmark = pytest.mark.usefixtures("ray_cluster")

LIMIT = 30


class Echo(Actor[Any, Any]):
    async def handle(self, message: Any) -> Any:
        if isinstance(message, BaseException):
            raise message
        if message == "pid":
            return os.getpid()
        if message == "sleep":
            await anyio.sleep(3600)
        if message == "lock":
            return threading.Lock()  # a reply that cannot be pickled
        return message


async def test_ask_tell_and_batches_on_ray() -> None:
    import ray

    with anyio.fail_after(LIMIT):
        async with pdc_ray.connect() as cluster, open_nursery() as nursery:
            assert not cluster.started  # the session's Ray: connect() leaves it alone
            ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0))
            assert isinstance(ref, pdc_ray.RemoteActorRef)
            assert ref.state is ActorState.RUNNING
            assert await ref.ask(5) == 5
            await ref.tell("told")
            assert await ref.ask_many(list(range(500))) == list(range(500))
            pid = await ref.ask("pid")
            assert pid != os.getpid()
            location = ref.location
            assert location is not None
            assert location.pid == pid
            assert location.node_id == ray.get_runtime_context().get_node_id()
            remote = await ref.remote_statistics()
            assert remote.handled == 1 + 1 + 500 + 1
    assert ray.is_initialized()


async def test_an_unpicklable_reply_is_a_type_error_for_its_ask_on_ray() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0))
            with pytest.raises(TypeError, match="could not be sent back") as info:
                await ref.ask("lock")
            assert "\x1b[" not in str(info.value)  # not a RayTaskError's coloured text
            assert await ref.ask(7) == 7  # the actor goes on
            assert ref.state is ActorState.RUNNING


async def test_a_remote_crash_reaches_the_nursery_with_its_cause() -> None:
    with anyio.fail_after(LIMIT):
        with pytest.raises(ActorCrashed) as info:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0))
                await ref.tell(LookupError("remote boom"))
                await anyio.sleep_forever()
    cause = info.value.cause
    assert isinstance(cause, LookupError)
    assert "remote boom" in str(cause)
    assert any("remote traceback" in note for note in getattr(cause, "__notes__", []))
    assert ref.state is ActorState.CRASHED


async def test_custom_resources_stand_in_for_gpus() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(
                Echo, placement=pdc_ray.on(num_cpus=0, resources={"accelerator": 1})
            )
            assert await ref.ask(1) == 1
            too_much = pdc_ray.on(num_cpus=0, resources={"accelerator": 2}, start_timeout=1.0)
            with pytest.raises(ActorCrashed, match="while starting") as info:
                await nursery.start_actor(Echo, placement=too_much)
            assert isinstance(info.value.cause, pdc_ray.PlacementTimeout)
            assert list(nursery.actors) == [ref.actor_id]


async def test_a_killed_worker_is_a_crash_caused_by_remote_actor_lost() -> None:
    with anyio.fail_after(LIMIT):
        with pytest.raises(ActorCrashed) as info:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0))
                pid = await ref.ask("pid")
                os.kill(pid, signal.SIGKILL)
                await anyio.sleep_forever()
    assert isinstance(info.value.cause, pdc_ray.RemoteActorLost)


async def test_cancellation_kills_the_worker_with_a_call_pending() -> None:
    with anyio.fail_after(LIMIT):
        with anyio.move_on_after(60) as scope:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0))
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ref.ask, "sleep")
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()
    assert scope.cancelled_caught
    assert ref.state is ActorState.STOPPED


async def test_restart_policy_restarts_in_a_fresh_worker() -> None:
    policy = RestartPolicy(max_restarts=1, within=60, backoff=0)
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Echo, placement=pdc_ray.on(num_cpus=0), restart=policy)
            first = await ref.ask("pid")
            with pytest.raises(ActorCrashed):
                await ref.ask(ValueError("once"))
            second = await ref.ask("pid")
            assert second != first
            assert ref.statistics().restarts == 1


async def test_placement_group_reserves_and_releases() -> None:
    from ray.util import placement_group_table

    with anyio.fail_after(LIMIT):
        async with (
            pdc_ray.placement_group([{"accelerator": 1}]) as group,
            open_nursery() as nursery,
        ):
            placement = pdc_ray.on(
                num_cpus=0,
                resources={"accelerator": 1},
                placement_group=group,
                bundle_index=0,
            )
            ref = await nursery.start_actor(Echo, placement=placement)
            assert await ref.ask(3) == 3
        assert placement_group_table(group)["state"] == "REMOVED"
