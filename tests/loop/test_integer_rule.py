"""One strict integer rule for counts, windows, coordinates and priorities (issue 35,
items 4, 8 and 13): an int or a NumPy integer, never a bool or a float (not even 2.0),
and an error names the argument the caller passed."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import Mailbox, PersistentKernel, RestartPolicy, open_nursery, persistent_kernel
from pdc_core.lowlevel import check_priority

LIMIT = 10
REC = np.dtype([("x", "<f8")])


async def echo(message: Any) -> Any:
    return message


def _same(requests: Any) -> Any:
    return requests.copy()


@pytest.mark.parametrize("count", [np.int64(4), np.int32(4), np.uint16(4)])
def test_numpy_integers_are_counts(count: Any) -> None:
    kernel = PersistentKernel("k", REC, REC, capacity=count, bodies={"cpu": _same})
    assert kernel.capacity == 4
    assert type(kernel.capacity) is int
    assert kernel.max_batch == 4
    assert type(kernel.max_batch) is int
    kernel = PersistentKernel("k", REC, REC, capacity=8, max_batch=count)
    assert kernel.max_batch == 4
    assert type(kernel.max_batch) is int
    decorated = persistent_kernel(request_dtype=REC, reply_dtype=REC, capacity=count)(_same)
    assert decorated.capacity == 4
    box: Mailbox[int] = Mailbox(capacity=count)
    assert box.capacity == 4
    assert type(box.capacity) is int


def test_count_errors_name_the_argument_given() -> None:
    for bad in (0, np.int64(0), -1):
        with pytest.raises(ValueError, match=r"^capacity must be at least 1"):
            PersistentKernel("k", REC, REC, capacity=bad)
        with pytest.raises(ValueError, match=r"^max_batch must be at least 1"):
            PersistentKernel("k", REC, REC, max_batch=bad)
        if bad == 0:
            assert Mailbox(capacity=bad).capacity == 0  # unbuffered, as anyio's 0
        else:
            with pytest.raises(ValueError, match=r"^capacity must be at least 0"):
                Mailbox(capacity=bad)
    for bad in (4.0, 1.5, True, "4", None):
        with pytest.raises(TypeError, match=r"^capacity must be an int"):
            PersistentKernel("k", REC, REC, capacity=bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^capacity must be an int"):
            Mailbox(capacity=bad)  # type: ignore[arg-type]
    for bad in (4.0, True):
        with pytest.raises(TypeError, match=r"^max_batch must be an int"):
            PersistentKernel("k", REC, REC, max_batch=bad)  # type: ignore[arg-type]


async def test_ask_stream_windows_follow_the_rule_of_priorities() -> None:
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(echo)
            for bad in (1.5, 2.0, True, np.float64(2.0), "2"):
                with pytest.raises(TypeError, match="window must be an int"):
                    async for _ in ref.ask_stream([1, 2, 3], window=bad):  # type: ignore[arg-type]
                        pass
                with pytest.raises(TypeError, match="priority must be an int"):
                    check_priority(bad)
            for bad in (0, -1, np.int64(0)):
                with pytest.raises(ValueError, match="window must be at least 1"):
                    async for _ in ref.ask_stream([1], window=bad):
                        pass
            for window in (np.int64(2), np.uint8(1), 3):
                assert [r async for r in ref.ask_stream([1, 2, 3], window=window)] == [1, 2, 3]
            assert ref.statistics().handled == 9  # nothing sent by a refused call


async def test_actor_counts_take_numpy_integers_and_refuse_floats() -> None:
    assert RestartPolicy(max_restarts=np.int64(2)).max_restarts == 2
    with pytest.raises(TypeError, match="max_restarts must be an int"):
        RestartPolicy(max_restarts=2.0)  # type: ignore[arg-type]
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(echo, capacity=np.int64(2), max_batch=np.int64(8))
            assert await ref.ask(1) == 1
            for bad in (2.0, True):
                with pytest.raises(TypeError, match="max_batch must be an int"):
                    await nursery.start_actor(echo, max_batch=bad)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="max_batch must be at least 1"):
                await nursery.start_actor(echo, max_batch=np.int64(0))


async def _seed_kernel(ctx: Any) -> None:
    """A ring kernel function that is only declared."""


@pytest.mark.parametrize("count", [np.int64(4), np.uint16(4)])
def test_numpy_integers_are_ring_kernel_queue_sizes(count: Any) -> None:
    from pdc_core import ring_kernel

    for sizes in ({"queue_size": count}, {"input_queue_size": count, "output_queue_size": count}):
        definition = ring_kernel(kernel_id="sized", auto_register=False, **sizes)(_seed_kernel)
        assert (definition.input_queue_size, definition.output_queue_size) == (4, 4)
        assert type(definition.input_queue_size) is type(definition.output_queue_size) is int


@pytest.mark.parametrize(
    ("sizes", "named"),
    [
        ({"queue_size": 0}, "queue_size"),
        ({"queue_size": 2.0}, "queue_size"),
        ({"input_queue_size": 0}, "input_queue_size"),  # never replaced by queue_size
        ({"output_queue_size": True}, "output_queue_size"),
    ],
)
def test_a_bad_ring_kernel_queue_size_is_named_as_the_caller_gave_it(
    sizes: dict[str, Any], named: str
) -> None:
    from pdc_core import ring_kernel

    with pytest.raises(ValueError, match=named):
        ring_kernel(kernel_id="bad", auto_register=False, **sizes)(_seed_kernel)
