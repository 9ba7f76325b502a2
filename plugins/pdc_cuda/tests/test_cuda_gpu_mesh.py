"""Kernel meshes on CUDA (issue 28): ``nursery.start_mesh(kernel, devices="all")`` with the
cuda backend starts one resident ring kernel per device, addressed as one handle. Marked
``cuda``, skipped with the backend's reason elsewhere (``pytest -m cuda plugins/pdc_cuda``).

Each test takes the ``cuda_mesh`` fixture: how ``devices=`` names the devices and the
backend of each. Here that is ``devices="all"`` with ``PDC_BACKEND=cuda`` (every GPU of
the machine); ``test_cuda_host_mesh.py`` runs these same functions on four host-build
devices. Every async test runs under asyncio and trio, under the watchdog of
``conftest.py``; nothing sleeps for a fixed time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import DOUBLE, REPLY, REQUEST, requires_gpu, skip_if_a_kernel_is_resident
from pdc_cuda import CudaRingBody

import pdc_core
from pdc_core import (
    ActorCrashed,
    ActorState,
    KernelActorRef,
    MeshError,
    PersistentKernel,
    PersistentKernelError,
    RestartPolicy,
    open_nursery,
)
from pdc_core.testing.pytest_plugin import anyio_backend  # noqa: F401 - asyncio and trio

pytestmark = [
    pytest.mark.cuda,
    requires_gpu(),
    pytest.mark.anyio,
    pytest.mark.usefixtures("gpu_watchdog"),
]

#: Seconds any one test may take before it fails (the watchdog ends a hang later).
LIMIT = 60

#: Request id that makes DOUBLE's body return error code 300.
FAIL_ID = 0xDEAD


def mesh_kernel() -> PersistentKernel:
    """Doubles x (DOUBLE of cuda_test_support); one warp per block."""
    kernel = PersistentKernel("mesh_double", REQUEST, REPLY, capacity=64)
    return kernel.add_body("cuda", CudaRingBody(DOUBLE, threads=32))


@dataclass
class CudaMesh:
    """What ``devices=`` says (``spec``) and the backend of each device it names."""

    spec: Any
    backends: list[Any]

    def resident(self) -> list[list[str]]:
        """The names of the kernels still resident, device by device."""
        return [[kernel.kernel.name for kernel in b.resident_kernels()] for b in self.backends]


@pytest.fixture
def cuda_mesh(monkeypatch: pytest.MonkeyPatch) -> CudaMesh:
    """``devices="all"`` of cuda: every GPU of the machine (a test that would start beside
    a kernel an earlier test left resident is skipped, saying so)."""
    monkeypatch.setenv("PDC_BACKEND", "cuda")
    first = pdc_core.get_backend("cuda")
    count = len(type(first).devices())
    backends = [
        skip_if_a_kernel_is_resident(pdc_core.get_backend(f"cuda:{i}")) for i in range(count)
    ]
    return CudaMesh("all", backends)


async def wait_until(condition: Callable[[], bool]) -> None:
    """Return once ``condition()`` holds (the kernels' words change it), within 30 s."""
    with anyio.fail_after(30):
        while not condition():  # noqa: ASYNC110 - the device side changes it
            await anyio.sleep(0.001)


def kernels(mesh: Any) -> list[KernelActorRef[Any, Any]]:
    members = list(mesh.members)
    assert all(isinstance(member, KernelActorRef) for member in members)
    return members


def ys(replies: list[Any]) -> list[float]:
    return [float(reply["y"]) for reply in replies]


async def test_call_scatter_stream_call_one_and_broadcast_over_every_device(cuda_mesh):
    n = len(cuda_mesh.backends)
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(mesh_kernel(), devices=cuda_mesh.spec, name="dbl")
            assert mesh.shape == {"device": n}
            refs = kernels(mesh)
            sessions = [ref.session for ref in refs]
            assert [s.backend for s in sessions if s is not None] == cuda_mesh.backends
            assert [len(b.resident_kernels()) for b in cuda_mesh.backends] == [1] * n

            replies = await mesh.call((1, 1.5))
            assert [int(r["id"]) for r in replies] == [1] * n
            assert ys(replies) == [3.0] * n

            scattered = await mesh.scatter([(10 + i, float(i)) for i in range(n)])
            assert [int(r["id"]) for r in scattered] == [10 + i for i in range(n)]
            assert ys(scattered) == [2.0 * i for i in range(n)]

            streamed = {point: float(reply["y"]) async for point, reply in mesh.stream((2, 4.0))}
            assert streamed == {(i,): 8.0 for i in range(n)}

            one = await mesh.call_one((3, 0.25))
            assert (int(one["id"]), float(one["y"])) == (3, 0.5)

            before = [ref.statistics().handled for ref in refs]
            await mesh.broadcast((4, 1.0))  # told: every kernel answers, nobody waits
            await wait_until(
                lambda: [r.statistics().handled for r in refs] == [h + 1 for h in before]
            )
            assert ys(await mesh.call((5, 2.0))) == [4.0] * n  # nothing stale in any ring
            if n > 1:
                half = mesh.slice(device=slice(0, n // 2))
                assert ys(await half.call((6, 3.0))) == [6.0] * (n // 2)
    assert set(mesh.states.values()) == {ActorState.STOPPED}
    assert cuda_mesh.resident() == [[]] * n  # the nursery's exit left nothing resident


async def test_a_member_error_word_fails_that_member_and_it_restarts_in_place(cuda_mesh):
    n = len(cuda_mesh.backends)
    last = n - 1
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                mesh_kernel(),
                devices=cuda_mesh.spec,
                name="dbl",
                restart=RestartPolicy(max_restarts=2, backoff=0),
            )
            refs = kernels(mesh)
            first_session = refs[last].session
            batch = [(i, float(i)) for i in range(n - 1)] + [(FAIL_ID, 1.0)]
            with pytest.raises(MeshError) as caught:
                await mesh.scatter(batch)
            error = caught.value
            assert list(error.failures) == [(last,)]
            crash = error.failures[(last,)]
            assert isinstance(crash, ActorCrashed)
            assert crash.actor_id == refs[last].actor_id
            assert isinstance(crash.cause, PersistentKernelError)
            assert crash.cause.code == 300
            assert "request #0" in crash.cause.detail
            assert {point: float(r["y"]) for point, r in error.replies.items()} == {
                (i,): 2.0 * i for i in range(n - 1)
            }
            # restarted in place: same handles and coordinates, a new kernel on that device
            assert ys(await mesh.call((7, 1.0))) == [2.0] * n
            assert mesh.members == refs
            assert refs[last].statistics().restarts == 1
            new_session = refs[last].session
            assert new_session is not None
            assert new_session is not first_session
            assert new_session.backend is cuda_mesh.backends[last]
            assert [len(b.resident_kernels()) for b in cuda_mesh.backends] == [1] * n
    assert cuda_mesh.resident() == [[]] * n


async def test_a_member_error_word_without_a_policy_fails_the_whole_mesh(cuda_mesh):
    n = len(cuda_mesh.backends)
    refs: list[Any] = []

    async def run() -> None:
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(mesh_kernel(), devices=cuda_mesh.spec, name="dbl")
            refs.extend(mesh.members)
            await mesh.scatter([(i, 1.0) for i in range(n - 1)] + [(FAIL_ID, 1.0)])

    with pytest.raises(ActorCrashed) as caught, anyio.fail_after(LIMIT):
        await run()
    assert caught.value.actor_id == refs[-1].actor_id
    assert isinstance(caught.value.cause, PersistentKernelError)
    assert caught.value.cause.code == 300
    assert [ref.state for ref in refs] == [ActorState.STOPPED] * (n - 1) + [ActorState.CRASHED]
    assert cuda_mesh.resident() == [[]] * n


async def test_a_cancelled_call_leaves_no_waiter_in_any_member(cuda_mesh):
    n = len(cuda_mesh.backends)
    if n < 2:
        # Member 0 answers while the others hold the call's requests in their rings: with
        # one member the call has finished before the cancel (the host mesh runs it on 4).
        pytest.skip(f"needs a mesh of two or more GPUs; this machine has {n}")
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(mesh_kernel(), devices=cuda_mesh.spec, name="dbl")
            refs = kernels(mesh)
            for ref in refs[1:]:
                await ref.pause()  # their requests wait in the rings
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(mesh.call, (8, 1.0))
                    # member 0 has answered; the others hold theirs in their rings
                    await wait_until(
                        lambda: (
                            refs[0].statistics().handled == 1
                            and all(r.session.statistics().sent == 1 for r in refs[1:])
                        )
                    )
                    scope.cancel()
            assert scope.cancelled_caught
            for ref in refs[1:]:
                await ref.resume()
            # Each paused kernel answers the cancelled request; nobody waits for it, so
            # its reply is discarded, and the next call gets its own replies only.
            replies = await mesh.call((9, 3.0))
            assert [int(r["id"]) for r in replies] == [9] * n
            assert ys(replies) == [6.0] * n
            assert [ref.session.statistics().discarded for ref in refs] == [0] + [1] * (n - 1)
            assert [ref.statistics().handled for ref in refs] == [2] * n
    assert cuda_mesh.resident() == [[]] * n
