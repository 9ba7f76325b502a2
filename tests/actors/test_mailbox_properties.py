"""Property tests for mailboxes (hypothesis).

* Against a reference model, for every policy: each message is delivered exactly once
  or accounted for (dropped only under ``drop_oldest``, refused only when full), in
  priority order, FIFO within a priority; the counters add up at every step.
* With concurrent producers and consumers under asyncio and trio: nothing is lost or
  duplicated, and each producer's messages of one priority arrive in the order sent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdc_core import Backpressure, Mailbox, MailboxFull

BACKENDS = ["asyncio", "trio"]
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ASYNC_PROPERTY = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))

priorities = st.integers(min_value=0, max_value=255) | st.sampled_from([0, 1, 128, 254, 255])
operations = st.lists(
    st.one_of(st.tuples(st.just("send"), priorities), st.just(("recv", 0))), max_size=120
)


@dataclass
class Model:
    """What a mailbox must do, written the slow, obvious way."""

    capacity: int
    policy: Backpressure
    queue: list[tuple[int, int, int]] = field(default_factory=list)  # (priority, seq, item)
    dropped: list[int] = field(default_factory=list)
    rejected: int = 0

    def send(self, item: int, priority: int) -> bool:
        """Return False when the send must raise MailboxFull."""
        if len(self.queue) < self.capacity:
            self.queue.append((priority, item, item))
            return True
        if self.policy is not Backpressure.DROP_OLDEST:
            self.rejected += 1
            return False
        lowest = min(p for p, _, _ in self.queue)
        if priority < lowest:
            self.dropped.append(item)
            return True
        victim = min((e for e in self.queue if e[0] == lowest), key=lambda e: e[1])
        self.queue.remove(victim)
        self.dropped.append(victim[2])
        self.queue.append((priority, item, item))
        return True

    def receive(self) -> int | None:
        if not self.queue:
            return None
        best = min(self.queue, key=lambda e: (-e[0], e[1]))
        self.queue.remove(best)
        return best[2]


@PROPERTY
@given(
    ops=operations,
    capacity=st.integers(min_value=1, max_value=8),
    policy=st.sampled_from(list(Backpressure)),
)
def test_mailbox_matches_the_model(
    ops: list[tuple[str, int]], capacity: int, policy: Backpressure
) -> None:
    dropped: list[int] = []
    mailbox: Mailbox[int] = Mailbox(capacity, backpressure=policy, on_drop=dropped.append)
    model = Model(capacity, policy)
    received: list[int] = []
    next_item = 0
    for op, priority in ops:
        if op == "send":
            accepted = model.send(next_item, priority)
            if accepted:
                mailbox.send_nowait(next_item, priority)
            else:
                with pytest.raises(MailboxFull):
                    mailbox.send_nowait(next_item, priority)
            next_item += 1
        else:
            expected = model.receive()
            if expected is None:
                with pytest.raises(anyio.WouldBlock):
                    mailbox.receive_nowait()
            else:
                item = mailbox.receive_nowait()
                assert item == expected
                received.append(item)  # type: ignore[arg-type]
        stats = mailbox.statistics()
        assert stats.sent == stats.received + stats.dropped + stats.discarded + stats.depth
        assert stats.depth == len(model.queue) <= capacity
    assert dropped == model.dropped
    stats = mailbox.statistics()
    assert stats.dropped == len(model.dropped)
    assert stats.rejected == model.rejected
    if policy is not Backpressure.DROP_OLDEST:
        assert stats.dropped == 0
    # drain: everything accepted comes out exactly once, in priority/FIFO order
    while (expected := model.receive()) is not None:
        item = mailbox.receive_nowait()
        assert item == expected
        received.append(item)  # type: ignore[arg-type]
    assert len(set(received)) == len(received)
    accounted = sorted(received + dropped)
    assert len(accounted) == next_item - model.rejected
    assert len(set(accounted)) == len(accounted)


@PROPERTY
@given(messages=st.lists(priorities, max_size=200))
def test_priority_order_fifo_within_priority(messages: list[int]) -> None:
    mailbox: Mailbox[int] = Mailbox(max(1, len(messages)))
    for i, priority in enumerate(messages):
        mailbox.send_nowait(i, priority)
    out = [mailbox.receive_nowait() for _ in messages]
    expected = sorted(range(len(messages)), key=lambda i: (-messages[i], i))
    assert out == expected


@PROPERTY
@given(
    batches=st.lists(st.tuples(st.lists(st.integers(), max_size=20), priorities), max_size=10),
    take=st.integers(min_value=1, max_value=30),
)
def test_batches_keep_order_and_count(batches: list[tuple[list[int], int]], take: int) -> None:
    mailbox: Mailbox[tuple[int, int]] = Mailbox(500)
    expected: list[tuple[int, int, int]] = []
    seq = 0
    for items, priority in batches:
        tagged = [(seq + k, x) for k, x in enumerate(items)]
        mailbox.send_many_nowait(tagged, priority)
        expected += [(priority, s, x) for s, x in tagged]
        seq += len(items)
    expected.sort(key=lambda e: (-e[0], e[1]))
    out: list[tuple[int, int]] = []
    while chunk := mailbox.receive_many_nowait(take):
        assert len(chunk) <= take
        out += chunk  # type: ignore[arg-type]
    assert out == [(s, x) for _, s, x in expected]
    assert mailbox.statistics().received == len(expected)


# --- concurrent, under asyncio and trio --------------------------------------------------


async def _concurrent_run(
    plan: list[list[int]], capacity: int, consumers: int, seed: int
) -> tuple[list[tuple[int, int, int]], Mailbox[tuple[int, int, int]]]:
    rng = random.Random(seed)
    mailbox: Mailbox[tuple[int, int, int]] = Mailbox(capacity)
    received: list[tuple[int, int, int]] = []
    yields = [rng.random() < 0.3 for _ in range(1000)]

    async def producer(pid: int, prios: list[int]) -> None:
        for k, priority in enumerate(prios):
            await mailbox.send((pid, k, priority), priority)
            if yields[(pid * 31 + k) % len(yields)]:
                await anyio.lowlevel.checkpoint()

    async def consumer() -> None:
        async for item in mailbox:
            received.append(item)  # type: ignore[arg-type]
            if yields[len(received) % len(yields)]:
                await anyio.lowlevel.checkpoint()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as consumers_tg:
            for _ in range(consumers):
                consumers_tg.start_soon(consumer)
            async with anyio.create_task_group() as producers_tg:
                for pid, prios in enumerate(plan):
                    producers_tg.start_soon(producer, pid, prios)
            mailbox.close()
    return received, mailbox


@pytest.mark.parametrize("backend", BACKENDS)
@ASYNC_PROPERTY
@given(
    plan=st.lists(st.lists(st.sampled_from([0, 5, 128, 255]), max_size=40), max_size=4),
    capacity=st.integers(min_value=1, max_value=6),
    consumers=st.integers(min_value=1, max_value=3),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_concurrent_exactly_once_and_fifo_per_producer(
    backend: str, plan: list[list[int]], capacity: int, consumers: int, seed: int
) -> None:
    received, mailbox = anyio.run(_concurrent_run, plan, capacity, consumers, seed, backend=backend)
    sent = {(pid, k, p) for pid, prios in enumerate(plan) for k, p in enumerate(prios)}
    assert len(received) == len(sent)
    assert set(received) == sent
    if consumers == 1:
        for pid, prios in enumerate(plan):
            for priority in set(prios):
                order = [k for (q, k, p) in received if q == pid and p == priority]
                assert order == sorted(order)
    stats = mailbox.statistics()
    assert stats.peak_depth <= capacity
    assert stats.dropped == stats.rejected == stats.discarded == 0
    assert stats.sent == stats.received == len(sent)


async def _paused_run(messages: list[int]) -> list[int]:
    mailbox: Mailbox[int] = Mailbox(max(1, len(messages)))
    mailbox.pause()
    for i, priority in enumerate(messages):
        await mailbox.send(i, priority)
    out: list[int] = []

    async def consume() -> None:
        for _ in messages:
            out.append(await mailbox.receive())  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.lowlevel.checkpoint()
        mailbox.resume()
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@ASYNC_PROPERTY
@given(messages=st.lists(priorities, max_size=60))
def test_async_priority_order_after_resume(backend: str, messages: list[int]) -> None:
    out = anyio.run(_paused_run, messages, backend=backend)
    assert out == sorted(range(len(messages)), key=lambda i: (-messages[i], i))
