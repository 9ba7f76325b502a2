"""Sequenced input slots (ring-protocol.md section 12), driven step by step.

The host stores each request's payload, then its slot's sequence word, then
``IN_HEAD``; a device may find requests by either. Hypothesis lets the reference device
run *between* the host's stores (after the payloads, after the sequence words) and
choose, at every step, whether it polls the sequence words or ``IN_HEAD``: every record
must come out exactly once, in order, computed from the payload the host wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdc_core import PersistentKernel, RingProtocolError, open_persistent_kernel
from pdc_core.backend import (
    LINE_SIZE,
    RING_VERSION,
    Offset,
    RingDevice,
    RingFeature,
    RingHost,
    RingLayout,
    RingMemory,
    sequenced_slot_size,
)

REP = np.dtype([("seq", "<u8"), ("y", "<i8")], align=True)


def request_dtype(size: int) -> np.dtype[Any]:
    """A request of ``size`` bytes (a multiple of 8, at least 16): its index, x, padding."""
    fields: list[Any] = [("seq", "<u8"), ("x", "<i4"), ("pad", "<u4")]
    if size > 16:
        fields.append(("rest", "u1", (size - 16,)))
    dtype = np.dtype(fields, align=True)
    assert dtype.itemsize == size
    return dtype


def requests(dtype: np.dtype[Any], start: int, count: int) -> Any:
    out = np.zeros(count, dtype)
    out["seq"] = np.arange(start, start + count)
    out["x"] = (np.arange(start, start + count) * 7) % 1000 - 500
    return out


def answer(device: RingDevice, index: int, count: int) -> None:
    inputs = device.inputs(index, count)
    outputs = device.outputs(index, count)
    outputs["seq"] = inputs["seq"]
    outputs["y"] = inputs["x"].astype(np.int64) * 3 + 1
    device.publish(count)


class SteppedHost(RingHost):
    """A host whose write lets ``between(stage)`` run the device between its stores:
    after the payloads (``"payloads"``) and after the sequence words (``"sequences"``)."""

    def __init__(self, memory: RingMemory, between: Callable[[str], None]) -> None:
        super().__init__(memory)
        self.between = between

    def _stamp(self, head: int, pieces: list[tuple[int, int, int]]) -> None:
        self.between("payloads")
        super()._stamp(head, pieces)
        self.between("sequences")


# -- layout ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("itemsize", "slot"),
    [(1, 16), (8, 16), (12, 32), (16, 32), (24, 32), (32, 64), (56, 64), (57, 128), (120, 128)],
)
def test_a_sequenced_slot_is_a_power_of_two_within_a_line_or_whole_lines(itemsize, slot):
    assert sequenced_slot_size(itemsize) == slot
    layout = RingLayout(np.dtype(("V", itemsize)), REP, 8, sequenced_input=True)
    assert layout.in_slot_size == slot
    offset = layout.in_sequence_offset
    assert offset == -(-itemsize // 8) * 8
    if offset + 8 <= LINE_SIZE:  # where the record fits: record and word share one line
        for k in range(8):
            start = layout.in_ring_offset + k * slot
            assert start // LINE_SIZE == (start + offset + 7) // LINE_SIZE
    else:  # larger records take whole lines
        assert slot % LINE_SIZE == 0


def test_the_header_says_how_the_input_ring_is_laid_out():
    dtype = request_dtype(16)
    plain = RingMemory.from_buffer(RingLayout(dtype, REP, 5))
    sequenced = RingMemory.from_buffer(RingLayout(dtype, REP, 5, sequenced_input=True))
    assert RING_VERSION == 2
    assert plain.load32(Offset.FEATURES) == RingFeature.NONE
    assert plain.load64(Offset.IN_SLOT_SIZE) == 16
    assert plain.in_sequences is None
    assert sequenced.load32(Offset.FEATURES) == RingFeature.SEQUENCED_INPUT
    assert sequenced.load64(Offset.IN_SLOT_SIZE) == 32
    assert sequenced.layout.out_ring_offset == 1216  # 1024 + 5 * 32, on a line
    assert sequenced.in_slots.strides == (32,)
    assert sequenced.in_sequences is not None
    assert sequenced.in_sequences.ctypes.data == sequenced.address + 1024 + 16
    assert Offset.FEATURES // LINE_SIZE == 11  # a header line of its own, the host's
    RingDevice(plain).check_header()
    RingDevice(sequenced).check_header()
    # A device that expects another layout refuses the region.
    sequenced.words32[Offset.FEATURES >> 2] = 0
    with pytest.raises(RingProtocolError, match="FEATURES is 0x0, expected 0x1"):
        RingDevice(sequenced).check_header()


def test_a_layout_keeps_or_drops_sequenced_slots():
    layout = RingLayout(request_dtype(16), REP, 4)
    assert layout.with_sequenced_input() == RingLayout(
        request_dtype(16), REP, 4, sequenced_input=True
    )
    assert layout.with_sequenced_input().with_sequenced_input(False) == layout
    with pytest.raises(TypeError, match="sequenced_input must be a bool"):
        RingLayout(request_dtype(16), REP, 4, sequenced_input=1)  # type: ignore[arg-type]


class _Backend:
    """Just what RingMemory.allocate uses of a backend."""

    name = "fake"

    def __init__(self, sequenced: bool) -> None:
        self.ring_sequenced_input = sequenced

    def allocate(self, shape: Any, dtype: Any, kind: Any) -> Any:
        return np.zeros(shape, dtype)


def test_a_backend_that_reads_across_a_bus_gets_sequenced_input_slots():
    layout = RingLayout(request_dtype(16), REP, 4)
    assert RingMemory.allocate(_Backend(True), layout).layout.sequenced_input  # type: ignore[arg-type]
    assert not RingMemory.allocate(_Backend(False), layout).layout.sequenced_input  # type: ignore[arg-type]
    exact = RingMemory.allocate(_Backend(True), layout, exact=True)  # type: ignore[arg-type]
    assert exact.layout == layout  # a link: its producer stores no sequence words


# -- the host's stores, in order ------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 3, 200])  # one record, a few, a byte-copied run
def test_payloads_then_sequence_words_then_in_head(count):
    dtype = request_dtype(24)
    memory = RingMemory.from_buffer(RingLayout(dtype, REP, 256, sequenced_input=True))
    device = RingDevice(memory)
    batch = requests(dtype, 0, count)
    seen: list[str] = []

    def between(stage: str) -> None:
        seen.append(stage)
        assert memory.load64(Offset.IN_HEAD) == 0  # not published yet
        index, found = device.next_sequenced_batch()
        if stage == "payloads":  # payloads are in, no sequence word yet
            assert found == 0
            assert memory.in_slots[:count]["seq"].tolist() == list(range(count))
        else:  # every sequence word is in: the device sees every request, whole
            assert found == count
            assert device.inputs(index, found).tobytes() == batch.tobytes()

    assert SteppedHost(memory, between).write(batch) == count
    assert seen == ["payloads", "sequences"]
    assert memory.load64(Offset.IN_HEAD) == count
    assert memory.in_sequences is not None
    assert memory.in_sequences[:count].tolist() == list(range(1, count + 1))


def test_sequence_words_follow_the_wrap_and_the_laps():
    dtype = request_dtype(16)
    memory = RingMemory.from_buffer(RingLayout(dtype, REP, 3, sequenced_input=True))
    host, device = RingHost(memory), RingDevice(memory)
    for lap in range(4):
        assert host.write(requests(dtype, 3 * lap, 3)) == 3
        index, count = device.next_sequenced_batch()
        assert (index, count) == (3 * lap, 3)
        answer(device, index, count)
        assert host.read()["seq"].tolist() == list(range(3 * lap, 3 * lap + 3))
    assert memory.in_sequences is not None
    assert memory.in_sequences.tolist() == [10, 11, 12]


def test_a_device_ahead_of_in_head_is_not_a_protocol_error():
    """Requests taken by their sequence words before the host stored IN_HEAD."""
    dtype = request_dtype(16)
    memory = RingMemory.from_buffer(RingLayout(dtype, REP, 4, sequenced_input=True))
    device = RingDevice(memory)
    taken: list[int] = []

    def between(stage: str) -> None:
        if stage == "sequences":
            index, count = device.next_sequenced_batch()
            answer(device, index, count)
            taken.append(count)
            assert device.load_in_head() == 0  # IN_HEAD lags in_tail: allowed
            assert device.next_batch() == (2, 0)

    host = SteppedHost(memory, between)
    assert host.write(requests(dtype, 0, 2)) == 2
    assert taken == [2]
    assert device.drained()
    assert host.read()["seq"].tolist() == [0, 1]


def test_a_sequence_word_that_is_neither_this_lap_nor_the_last_is_named():
    dtype = request_dtype(16)
    memory = RingMemory.from_buffer(RingLayout(dtype, REP, 4, sequenced_input=True))
    assert memory.in_sequences is not None
    memory.in_sequences[0] = 7
    with pytest.raises(RingProtocolError, match="sequence word of request 0's slot is 7"):
        RingDevice(memory).next_sequenced_batch()
    plain = RingMemory.from_buffer(RingLayout(dtype, REP, 4))
    with pytest.raises(RingProtocolError, match="no sequence words"):
        RingDevice(plain).next_sequenced_batch()


# -- any interleaving -----------------------------------------------------------------------

steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 9)),
        st.tuples(st.just("read"), st.just(0)),
        st.tuples(st.sampled_from(["by sequence", "by in_head"]), st.integers(0, 4)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    size=st.sampled_from([16, 24, 48, 56, 64, 136]),
    in_cap=st.integers(1, 6),
    out_cap=st.integers(1, 6),
    script=steps,
    data=st.data(),
)
def test_exactly_once_in_order_whichever_word_the_device_polls(
    size: int, in_cap: int, out_cap: int, script: list[tuple[str, int]], data: Any
) -> None:
    dtype = request_dtype(size)
    memory = RingMemory.from_buffer(RingLayout(dtype, REP, in_cap, out_cap, sequenced_input=True))
    device = RingDevice(memory)
    device.check_header()

    def device_step(how: str, limit: int) -> None:
        polling = device.next_sequenced_batch if how == "by sequence" else device.next_batch
        index, count = polling(limit or None)
        if count:
            answer(device, index, count)

    def between(stage: str) -> None:  # the device may run between the host's stores
        for _ in range(data.draw(st.integers(0, 2), label=f"steps after the {stage}")):
            device_step(data.draw(st.sampled_from(["by sequence", "by in_head"])), 0)

    host = SteppedHost(memory, between)
    source = requests(dtype, 0, 60)
    sent, got = 0, []
    for action, value in script:
        if action == "write":
            sent += host.write(source[sent : min(len(source), sent + value)])
        elif action == "read":
            got.extend(host.read().tolist())
        else:
            device_step(action, value)
    while len(got) < sent:
        device_step("by sequence", 0)
        device_step("by in_head", 0)
        got.extend(host.read().tolist())
    seqs = [reply[0] for reply in got]
    assert seqs == list(range(sent))
    assert [reply[1] for reply in got] == [int(x) * 3 + 1 for x in source["x"][:sent]]
    assert device.drained()


# -- the CPU backend with a layout that asks for sequence words -------------------------------


def _doubler() -> PersistentKernel:
    kernel = PersistentKernel("doubler", request_dtype(16), REP, capacity=5)

    @kernel.body("cpu")
    def body(batch: Any) -> Any:
        replies = np.empty(len(batch), REP)
        replies["seq"] = batch["seq"]
        replies["y"] = batch["x"].astype(np.int64) * 2
        return replies

    kernel.layout = kernel.layout.with_sequenced_input()
    return kernel


async def test_the_cpu_backend_runs_a_sequenced_ring() -> None:
    kernel = _doubler()
    async with open_persistent_kernel(kernel, "cpu") as session:
        assert session.memory.layout.sequenced_input
        reply = await session.request((3, 21, 0))
        assert (int(reply["seq"]), int(reply["y"])) == (3, 42)
        batch = requests(kernel.request_dtype, 0, 1000)  # 1000 records through 5 slots
        replies = await session.request_batch(batch)
        assert replies["seq"].tolist() == list(range(1000))
        assert replies["y"].tolist() == (batch["x"].astype(np.int64) * 2).tolist()
        sequences = session.memory.in_sequences
        assert sequences is not None
        assert sorted(sequences.tolist()) == list(range(997, 1002))  # the last lap's words


# -- records of one word ------------------------------------------------------------------------

#: Records of one word: the 8 bytes of ``benchmarks/cuda_ring.py``'s batched
#: throughput, and 8 bytes of which 3 are padding.
ONE_WORD = [
    np.dtype([("id", "<u8")]),
    np.dtype([("a", "<u4"), ("b", "u1")], align=True),
]


@pytest.mark.parametrize("dtype", ONE_WORD, ids=str)
async def test_request_batch_of_one_word_records_through_sequenced_slots(dtype) -> None:
    """Batches larger than the ring, and a short one, come back whole and in order."""
    kernel = PersistentKernel("echo", dtype, dtype, capacity=64)
    kernel.add_body("cpu", lambda batch: batch.copy())
    kernel.layout = kernel.layout.with_sequenced_input()
    async with open_persistent_kernel(kernel, "cpu") as session:
        assert session.memory.layout.sequenced_input
        for count in (1000, 3):
            batch = np.zeros(count, dtype)
            first = dtype.names[0]
            batch[first] = np.arange(count)
            replies = await session.request_batch(batch)
            assert replies[first].tolist() == list(range(count))
