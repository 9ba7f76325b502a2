"""Remote persistent kernels on a real local Ray (see conftest.py): resident in a Ray
worker on the CPU backend here, on the worker's GPU with ``num_gpus=1`` where a GPU is
lent (``cuda``-marked, skipped without one). Nothing is left behind after any test."""

# ruff: noqa: PT012

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pdc_ray
import pytest

from pdc_core import (
    ActorCrashed,
    ActorNursery,
    ActorState,
    PersistentKernel,
    PersistentKernelError,
    open_nursery,
)

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
#: ``on_gpu`` says which body answered: 1 from the CUDA body, 0 from the CPU body.
REP = np.dtype([("id", "<u8"), ("y", "<f8"), ("on_gpu", "<u4")], align=True)
LIMIT = 30
#: A request with this id makes the CPU body sleep (until its process is killed).
SLEEP_ID = 999_999

ON_GPU = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    reply.id = request.id;
    reply.y = 2.0 * request.x;
    reply.on_gpu = 1u;
    return request.x < 0.0 ? 2 : 0;
}
"""


def on_host(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    if (requests["id"] == SLEEP_ID).any():
        time.sleep(LIMIT)
    if (requests["x"] < 0).any():
        raise ValueError("negative input")
    replies = np.zeros(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


WHERE = PersistentKernel("where", REQ, REP, capacity=64, bodies={"cpu": on_host, "cuda": ON_GPU})


async def start(nursery: ActorNursery, placement: pdc_ray.RayPlacement) -> pdc_ray.RemoteKernelRef:
    """Start :data:`WHERE` at ``placement``; its handle, typed."""
    ref = await nursery.start_actor(WHERE, placement=placement)
    assert isinstance(ref, pdc_ray.RemoteKernelRef)
    return ref


def records(start: int, count: int) -> npt.NDArray[Any]:
    out = np.zeros(count, REQ)
    out["id"] = np.arange(start, start + count)
    out["x"] = np.arange(start, start + count) * 0.5
    return out


@pytest.mark.usefixtures("ray_cluster")
async def test_a_kernel_runs_resident_in_a_ray_worker_on_the_cpu_backend() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            placement = pdc_ray.on(num_cpus=0, backend="cpu")
            ref = await start(nursery, placement)
            assert ref.location is not None
            assert ref.location.pid != os.getpid()
            reply = await ref.ask((1, 2.0))
            assert (int(reply["id"]), float(reply["y"]), int(reply["on_gpu"])) == (1, 4.0, 0)
            batch = records(0, 5000)  # a few hundred kB: Ray's object store both ways
            replies = await ref.ask_batch(batch)
            assert replies.dtype == REP
            assert replies.flags.writeable
            np.testing.assert_array_equal(replies["id"], batch["id"])
            np.testing.assert_array_equal(replies["y"], batch["x"] * 2)
            await ref.tell_many(records(10_000, 100))
            many = await ref.ask_many([(7, 3.0), (8, 4.0)])
            assert [float(r["y"]) for r in many] == [6.0, 8.0]
            remote = await ref.remote_statistics()
            assert remote.handled == 1 + 5000 + 100 + 2
        assert ref.state is ActorState.STOPPED


@pytest.mark.usefixtures("ray_cluster")
async def test_a_kernel_crash_in_a_ray_worker_reaches_the_nursery_with_its_cause() -> None:
    failed: list[ActorCrashed] = []
    with anyio.fail_after(LIMIT):
        with pytest.raises(ActorCrashed) as info:
            async with open_nursery() as nursery:
                placement = pdc_ray.on(num_cpus=0, backend="cpu")
                ref = await start(nursery, placement)
                try:
                    await ref.ask((1, -1.0))
                except ActorCrashed as exc:
                    failed.append(exc)
                await anyio.sleep_forever()
    cause = info.value.cause
    assert isinstance(cause, PersistentKernelError)
    assert "negative input" in str(cause)
    assert len(failed) == 1
    assert isinstance(failed[0].cause, PersistentKernelError)
    assert ref.state is ActorState.CRASHED


@pytest.mark.usefixtures("ray_cluster")
async def test_cancellation_kills_the_worker_with_a_kernel_busy() -> None:
    with anyio.fail_after(LIMIT):
        with anyio.CancelScope() as scope:
            async with open_nursery() as nursery:
                placement = pdc_ray.on(num_cpus=0, backend="cpu")
                ref = await start(nursery, placement)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ref.ask, (SLEEP_ID, 1.0))
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()
    assert scope.cancelled_caught
    assert ref.state is ActorState.STOPPED


def test_the_gpu_body_compiles() -> None:
    """The CUDA body of the GPU test below, rendered and compiled to PTX (no GPU)."""
    pdc_cuda = pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed")
    try:
        ptx = pdc_cuda.compile_ring_kernel_ptx(ON_GPU, REQ, REP)
    except pdc_cuda.NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    assert ".entry pdc_ring_kernel(" in ptx


def _gpu_unavailable() -> str | None:
    try:
        from pdc_cuda import CudaBackend
    except ImportError:
        return "pdc-cuda is not installed"
    availability = CudaBackend.availability()
    if not availability.available:
        return f"the cuda backend is unavailable here: {availability.reason}"
    return None


@pytest.mark.cuda
@pytest.mark.skipif(_gpu_unavailable() is not None, reason=f"needs a GPU: {_gpu_unavailable()}")
async def test_num_gpus_1_runs_the_kernel_resident_on_the_workers_gpu(ray_cluster: Any) -> None:
    if ray_cluster.cluster_resources().get("GPU", 0) < 1:
        pytest.skip("the session's local Ray detected no GPU")
    with anyio.fail_after(LIMIT * 4):  # a first launch compiles the kernel (NVRTC)
        with pytest.raises(ActorCrashed) as info:
            async with open_nursery() as nursery:
                # No backend named: the worker's best available one, cuda on its GPU.
                ref = await start(nursery, pdc_ray.on(num_gpus=1))
                assert ref.location is not None
                assert len(ref.location.gpu_ids) == 1
                batch = records(0, 1000)
                replies = await ref.ask_batch(batch)
                assert set(replies["on_gpu"]) == {1}
                np.testing.assert_array_equal(replies["y"], batch["x"] * 2)
                reply = await ref.ask((5, 1.5))
                assert (int(reply["id"]), float(reply["y"]), int(reply["on_gpu"])) == (5, 3.0, 1)
                await ref.tell((6, -1.0))  # the body returns error code 2: a crash
                await anyio.sleep_forever()
    assert isinstance(info.value.cause, PersistentKernelError)
    assert ref.state is ActorState.CRASHED
