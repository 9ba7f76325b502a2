"""A soak on the session's real local Ray (see conftest.py): 100,000 messages through
one remote actor, none lost, in order, memory bounded. Skipped without Ray."""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

import anyio
import pdc_ray
import pytest

from pdc_core import Actor, open_nursery

pytestmark = pytest.mark.usefixtures("ray_cluster")

MESSAGES = 100_000
CHUNK = 2_000  # messages per ask_many
CAPACITY = 512  # the local mailbox
MAX_BATCH = 256  # messages per Ray call
WINDOW = 4  # Ray calls in flight
#: Growth of traced memory allowed between the first tenth of the run and its end.
MEMORY_GROWTH = 4 * 1024 * 1024


class InOrder(Actor[int, int]):
    """Expects 0, 1, 2, ... and answers each message with twice its value."""

    def __init__(self) -> None:
        self.next = 0

    async def handle(self, message: int) -> int:
        if message != self.next:
            raise AssertionError(f"got message {message}, expected {self.next}")
        self.next += 1
        return 2 * message


async def test_a_hundred_thousand_messages_none_lost_in_order_memory_bounded() -> None:
    peak_inflight = 0
    traced: list[int] = []
    started = time.perf_counter()
    gc.collect()
    tracemalloc.start()
    try:
        with anyio.fail_after(120):
            async with open_nursery() as nursery:
                ref: Any = await nursery.start_actor(
                    InOrder,
                    placement=pdc_ray.on(num_cpus=0, window=WINDOW),
                    capacity=CAPACITY,
                    max_batch=MAX_BATCH,
                )
                runner = ref._runner
                done = anyio.Event()

                async def sample() -> None:
                    nonlocal peak_inflight
                    while not done.is_set():
                        inflight = runner._inflight
                        peak_inflight = max(peak_inflight, len(inflight))
                        assert sum(map(len, inflight.values())) <= WINDOW * MAX_BATCH
                        await anyio.sleep(0.0005)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(sample)
                    for start in range(0, MESSAGES, CHUNK):
                        if start == MESSAGES // 10:
                            gc.collect()
                            traced.append(tracemalloc.get_traced_memory()[0])
                        replies = await ref.ask_many(list(range(start, start + CHUNK)))
                        assert replies == [2 * m for m in range(start, start + CHUNK)]
                    done.set()
                gc.collect()
                traced.append(tracemalloc.get_traced_memory()[0])
                local = ref.statistics()
                remote = await ref.remote_statistics()
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    assert remote.handled == MESSAGES  # none lost, none twice
    assert remote.errors == 0
    assert local.mailbox.sent == local.mailbox.received == MESSAGES
    assert local.mailbox.peak_depth <= CAPACITY
    assert 1 <= peak_inflight <= WINDOW
    growth = traced[1] - traced[0]
    assert growth < MEMORY_GROWTH, f"traced memory grew by {growth / 1e6:.1f} MB"
    print(
        f"soak: {MESSAGES} messages in {elapsed:.1f} s, peak mailbox "
        f"{local.mailbox.peak_depth}/{CAPACITY}, peak in flight {peak_inflight}/{WINDOW}, "
        f"memory growth {growth / 1e3:.0f} kB"
    )
