"""The ring protocol, driven step by step: host and reference device endpoints, no threads.

Hypothesis chooses the interleaving of host writes, device batches and host reads, the
capacities (1, 2, odd, unequal) and the batch sizes; the properties are exactly-once,
order, wrap-around and backpressure.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdc_core import RecordError, RingProtocolError
from pdc_core.backend import (
    CONTROL_BLOCK_SIZE,
    ERROR_MESSAGE_SIZE,
    LINE_SIZE,
    RING_MAGIC,
    ErrorCode,
    Offset,
    RingDevice,
    RingHost,
    RingLayout,
    RingMemory,
    StopMode,
    coerce_batch,
    coerce_record,
    copy_records,
    records_copy,
)

REQ = np.dtype([("seq", "<u8"), ("x", "<i4")], align=True)
REP = np.dtype([("seq", "<u8"), ("y", "<i8")], align=True)


def body(requests: Any) -> Any:
    replies = np.empty(len(requests), REP)
    replies["seq"] = requests["seq"]
    replies["y"] = requests["x"].astype(np.int64) * 3 + 1
    return replies


def make(in_cap: int, out_cap: int | None = None) -> tuple[RingMemory, RingHost, RingDevice]:
    memory = RingMemory.from_buffer(RingLayout(REQ, REP, in_cap, out_cap))
    device = RingDevice(memory)
    device.check_header()
    device.mark_started()
    return memory, RingHost(memory), device


def records(start: int, count: int) -> Any:
    out = np.zeros(count, REQ)
    out["seq"] = np.arange(start, start + count)
    out["x"] = (np.arange(start, start + count) * 7) % 1000 - 500
    return out


def device_step(device: RingDevice, limit: int | None) -> int:
    index, count = device.next_batch(limit)
    if count:
        inputs = device.inputs(index, count)
        outputs = device.outputs(index, count)
        # a run never wraps: its slots are contiguous in both rings
        assert inputs.base is not None
        assert len(inputs) == count
        assert len(outputs) == count
        outputs[...] = body(inputs)
        device.publish(count)
    return count


# -- layout -----------------------------------------------------------------------------


def test_each_line_has_one_writer() -> None:
    host_words = {Offset.IN_HEAD, Offset.OUT_TAIL, Offset.STOP, Offset.PAUSE}
    kernel_words = {
        Offset.IN_TAIL,
        Offset.OUT_HEAD,
        Offset.STARTED,
        Offset.PAUSED,
        Offset.DONE,
        Offset.ERROR_CODE,
        Offset.ERROR_LENGTH,
        Offset.BATCHES,
        Offset.ERROR_MESSAGE,
    }
    host_lines = {word // LINE_SIZE for word in host_words}
    kernel_lines = {word // LINE_SIZE for word in kernel_words}
    assert host_lines.isdisjoint(kernel_lines)
    assert 0 not in host_lines | kernel_lines  # line 0 is the header
    # the indices each have a line of their own
    index_lines = [word // LINE_SIZE for word in (Offset.IN_HEAD, Offset.IN_TAIL)]
    index_lines += [word // LINE_SIZE for word in (Offset.OUT_HEAD, Offset.OUT_TAIL)]
    assert len(set(index_lines)) == 4
    assert Offset.ERROR_MESSAGE + ERROR_MESSAGE_SIZE <= CONTROL_BLOCK_SIZE
    for word in Offset:
        width = 8 if word in {Offset.IN_HEAD, Offset.IN_TAIL, Offset.OUT_HEAD} else 4
        assert word % min(width, 8) == 0


@pytest.mark.parametrize(("in_cap", "out_cap"), [(1, 1), (2, 2), (3, 5), (7, 2), (256, 256)])
def test_layout_and_header(in_cap: int, out_cap: int) -> None:
    layout = RingLayout(REQ, REP, in_cap, out_cap)
    memory = RingMemory.from_buffer(layout)
    assert memory.address % 64 == 0
    assert layout.in_ring_offset == CONTROL_BLOCK_SIZE
    assert layout.out_ring_offset % 64 == 0
    assert layout.out_ring_offset >= CONTROL_BLOCK_SIZE + in_cap * REQ.itemsize
    assert layout.total_size % 64 == 0
    assert layout.total_size >= layout.out_ring_offset + out_cap * REP.itemsize
    assert memory.load32(Offset.MAGIC) == RING_MAGIC
    assert bytes(memory.base[:4]) == b"PDCR"
    assert memory.load64(Offset.IN_CAPACITY) == in_cap
    assert memory.load64(Offset.OUT_CAPACITY) == out_cap
    assert memory.load64(Offset.IN_SLOT_SIZE) == REQ.itemsize
    assert memory.load64(Offset.OUT_SLOT_SIZE) == REP.itemsize
    assert memory.load64(Offset.OUT_RING) == layout.out_ring_offset
    assert memory.load64(Offset.TOTAL_SIZE) == layout.total_size
    # the slot views sit exactly where the header says
    assert memory.in_slots.ctypes.data == memory.address + layout.in_ring_offset
    assert memory.out_slots.ctypes.data == memory.address + layout.out_ring_offset
    RingDevice(memory).check_header()


def test_layout_rejects_bad_dtypes_and_capacities() -> None:
    with pytest.raises(TypeError, match="Python objects"):
        RingLayout(np.dtype([("o", "O")]), REP, 4)
    with pytest.raises(TypeError, match="no size"):
        RingLayout(np.dtype("V0"), REP, 4)
    with pytest.raises(TypeError, match="subarray"):
        RingLayout(np.dtype(("f4", 4)), REP, 4)
    with pytest.raises(ValueError, match="at least 1"):
        RingLayout(REQ, REP, 0)
    with pytest.raises(TypeError, match="must be an int"):
        RingLayout(REQ, REP, 2.5)  # type: ignore[arg-type]


def test_device_refuses_a_bad_header() -> None:
    memory = RingMemory.from_buffer(RingLayout(REQ, REP, 4))
    memory.words32[Offset.MAGIC // 4] = 0
    with pytest.raises(RingProtocolError, match="magic"):
        RingDevice(memory).check_header()
    memory.initialize()
    memory.words64[Offset.IN_CAPACITY // 8] = 5
    with pytest.raises(RingProtocolError, match="IN_CAPACITY"):
        RingDevice(memory).check_header()


# -- properties ---------------------------------------------------------------------------

capacities = st.sampled_from([1, 2, 3, 5, 7, 8])
operations = st.lists(
    st.tuples(st.sampled_from(["write", "device", "read"]), st.integers(1, 12)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(in_cap=capacities, out_cap=capacities, ops=operations, limit=st.none() | st.integers(1, 4))
def test_exactly_once_in_order_under_any_interleaving(
    in_cap: int, out_cap: int, ops: list[tuple[str, int]], limit: int | None
) -> None:
    memory, host, device = make(in_cap, out_cap)
    sent = 0
    received: list[Any] = []
    for op, n in ops:
        if op == "write":
            free = host.free_slots()
            assert 0 <= free <= in_cap
            written = host.write(records(sent, n))
            assert written == min(n, free)  # backpressure: never more than fits
            sent += written
        elif op == "device":
            for _ in range(n):
                device_step(device, limit)
        else:
            got = host.read(n)
            assert len(got) <= n
            received.extend(got.tolist())
        # invariants of the control block after every step
        words = memory.snapshot()
        assert words["out_tail"] <= words["out_head"] <= words["in_tail"] <= words["in_head"]
        assert words["in_head"] - words["in_tail"] <= in_cap
        assert words["out_head"] - words["out_tail"] <= out_cap
        assert words["in_head"] == sent
    # drain: everything sent comes back exactly once, in order, correctly computed
    while len(received) < sent:
        progressed = device_step(device, limit)
        got = host.read()
        received.extend(got.tolist())
        assert progressed or len(got), "no progress with requests outstanding"
    expected = body(records(0, sent))
    assert received == expected.tolist()
    assert host.read().size == 0


@settings(max_examples=60, deadline=None)
@given(
    in_cap=capacities,
    batches=st.lists(st.integers(1, 20), min_size=1, max_size=8),
    limits=st.lists(st.none() | st.integers(1, 6), min_size=1, max_size=5),
)
def test_batch_boundaries_do_not_matter(
    in_cap: int, batches: list[int], limits: list[int | None]
) -> None:
    """Host batches split across wrap and full rings, device batches of any size:
    the replies are those of processing the records one by one."""
    _memory, host, device = make(in_cap)
    total = sum(batches)
    stream = records(0, total)
    position = 0
    received: list[Any] = []
    step = 0
    for size in batches:
        batch = stream[position : position + size]
        position += size
        done = 0
        while done < size:
            done += host.write(batch[done:])
            device_step(device, limits[step % len(limits)])
            step += 1
            received.extend(host.read().tolist())
    while len(received) < total:
        device_step(device, limits[step % len(limits)])
        step += 1
        received.extend(host.read().tolist())
    assert received == body(stream).tolist()


@pytest.mark.parametrize("capacity", [1, 2, 3])
def test_full_rings_backpressure(capacity: int) -> None:
    memory, host, device = make(capacity)
    assert host.write(records(0, capacity + 3)) == capacity
    before = memory.in_slots.copy()
    assert host.free_slots() == 0
    assert host.write(records(capacity, 1)) == 0  # full: nothing written, nothing published
    assert (memory.in_slots == before).all()
    assert memory.load64(Offset.IN_HEAD) == capacity
    # the device fills the output ring, then must wait for the host to read
    while device_step(device, None):
        pass
    assert memory.load64(Offset.OUT_HEAD) == capacity
    assert host.write(records(capacity, capacity)) == capacity
    assert device.next_batch() == (capacity, 0)  # output ring full: no batch
    assert len(host.read(1)) == 1
    assert device_step(device, None) == 1


def test_wraparound_indices_keep_growing() -> None:
    memory, host, device = make(3)
    received = []
    for round_ in range(50):
        assert host.write(records(round_ * 2, 2)) == 2
        while device_step(device, None):
            pass
        received.extend(host.read().tolist())
    assert memory.load64(Offset.IN_HEAD) == 100
    assert memory.load64(Offset.OUT_TAIL) == 100
    assert received == body(records(0, 100)).tolist()


def test_published_views_wrap_and_release_frees_the_slots() -> None:
    _, host, device = make(4)
    assert host.write(records(0, 3)) == 3
    while device_step(device, None):
        pass
    host.load_out_head()
    assert host.read(limit=2).tolist() == body(records(0, 2)).tolist()
    assert host.write(records(3, 3)) == 3  # slots 3, 0, 1: the replies wrap
    while device_step(device, None):
        pass
    host.load_out_head()
    pieces = host.published()
    assert [len(piece) for piece in pieces] == [2, 2]  # slots 2-3, then 0-1
    assert np.concatenate(pieces).tolist() == body(records(2, 4)).tolist()
    assert [len(piece) for piece in host.published(limit=3)] == [2, 1]
    with pytest.raises(ValueError, match="cannot release 5 replies: 4 are published"):
        host.release(5)
    host.release(3)
    assert host.read().tolist() == body(records(5, 1)).tolist()
    assert host.published() == []


def test_record_copies_copy_bytes_or_fields() -> None:
    source = records(0, 600)[::100]  # not contiguous
    target = np.zeros(6, REQ)
    copy_records(target, source)
    assert target.tolist() == source.tolist()
    source = records(0, 600)
    target = np.zeros(600, REQ)
    copy_records(target, source)  # contiguous and long: as bytes
    assert target.tolist() == source.tolist()
    source = records(0, 6)
    strided = np.zeros(12, REQ)[::2]  # not contiguous: copied field by field
    copy_records(strided, source)
    assert strided.tolist() == source.tolist()
    with pytest.raises(ValueError, match="cannot copy"):
        copy_records(np.zeros(5, REQ), source)
    with pytest.raises(ValueError, match="cannot copy"):
        copy_records(np.zeros(6, REP), source)
    for count in (3, 1000):  # assigned, then copied as bytes
        many = records(0, count)
        copy = records_copy(many)
        assert copy.dtype == REQ
        assert copy.tolist() == many.tolist()
        assert not np.shares_memory(copy, many)


@pytest.mark.parametrize("count", [1, 3, 127, 128, 1000])
def test_padded_records_are_copied_with_their_padding(count: int) -> None:
    """A field-by-field copy would leave the destination's padding as ``np.empty`` left
    it (this process's heap bytes): short runs of records with padding are copied as
    bytes too, so a reply's padding (zero in a ring slot) is what arrives."""
    padded = np.dtype([("id", "<u8"), ("flag", "u1")], align=True)  # 7 bytes of padding
    source = np.zeros(count, padded)
    source["id"] = np.arange(count)
    source["flag"] = 1
    assert records_copy(source).tobytes() == source.tobytes()
    target = np.full(count * padded.itemsize, 0xFF, np.uint8).view(padded)  # stale bytes
    copy_records(target, source)
    assert target.tobytes() == source.tobytes()
    nested = np.dtype([("p", np.dtype([("a", "<u4"), ("b", "u1")], align=True), (2,))])
    source = np.zeros(count, nested)
    target = np.full(count * nested.itemsize, 0xFF, np.uint8).view(nested)
    copy_records(target, source)
    assert target.tobytes() == source.tobytes()


def test_stop_modes_on_the_reference_device() -> None:
    _memory, host, device = make(4)
    host.write(records(0, 4))
    host.request_stop(StopMode.DRAIN)
    assert device.stop_mode() is StopMode.DRAIN
    device_step(device, 3)
    assert not device.drained()
    device_step(device, 3)
    assert device.drained()
    host.request_stop(StopMode.NOW)
    assert device.stop_mode() is StopMode.NOW
    host.request_stop(StopMode.DRAIN)  # NOW is not weakened
    assert host.stop_requested is StopMode.NOW


def test_host_detects_a_kernel_breaking_the_protocol() -> None:
    memory, host, _device = make(4)
    host.write(records(0, 2))
    memory.words64[Offset.IN_TAIL // 8] = 3  # past in_head
    with pytest.raises(RingProtocolError, match="in_tail"):
        host.free_slots() or host.load_in_tail()
    memory.words64[Offset.IN_TAIL // 8] = 0
    memory.words64[Offset.OUT_HEAD // 8] = 5
    with pytest.raises(RingProtocolError, match="out_head"):
        host.read()


def test_device_detects_a_host_breaking_the_protocol() -> None:
    memory, _host, device = make(4)
    memory.words64[Offset.IN_HEAD // 8] = 5  # more than capacity published
    with pytest.raises(RingProtocolError, match="in_head"):
        device.next_batch()
    memory.words64[Offset.IN_HEAD // 8] = 0
    memory.words32[Offset.STOP // 4] = 9
    with pytest.raises(RingProtocolError, match="STOP"):
        device.stop_mode()


def test_error_word_and_message() -> None:
    memory, host, device = make(2)
    message = "é" * 200  # 400 bytes of UTF-8: cut to whole characters within 256 bytes
    device.set_error(ErrorCode.BODY, message)
    device.mark_done()
    assert host.error_code == ErrorCode.BODY
    assert host.done
    assert memory.error_message() == "é" * 128
    assert memory.load32(Offset.ERROR_LENGTH) == 256
    with pytest.raises(ValueError, match="error code"):
        device.set_error(0, "no")


# -- records --------------------------------------------------------------------------------


def test_coerce_record_accepts_the_natural_forms() -> None:
    one = np.zeros(1, REQ)
    assert coerce_record(one, REQ) is not None
    assert coerce_record(one[0], REQ)["seq"][0] == 0
    assert coerce_record((5, 6), REQ)["x"][0] == 6
    assert coerce_record({"seq": 1, "x": 2}, REQ)["x"][0] == 2
    raw = coerce_record(b"\x07", REQ)
    assert raw["seq"][0] == 7
    assert raw["x"][0] == 0
    assert coerce_record(3.5, np.dtype("f8"))[0] == 3.5


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.zeros(1, REP), "dtype .* but the ring's record dtype is"),
        (np.zeros(2, REQ), r"shape \(2,\)"),
        (np.zeros(1, np.dtype([("a", "<f8"), ("b", "<f8"), ("c", "<f8")])), "24 bytes .* 16-byte"),
        (b"x" * 17, "payload of 17 bytes is larger than a 16-byte slot"),
        ({"seq": 1}, "missing field"),
        ({"seq": 1, "x": 2, "z": 3}, "unknown field"),
        ((1, 2, 3), "cannot make"),
        ("text", "has 2 fields"),
    ],
)
def test_coerce_record_names_the_problem(value: Any, match: str) -> None:
    with pytest.raises(RecordError, match=match):
        coerce_record(value, REQ)


def test_coerce_batch() -> None:
    batch = records(0, 3)
    assert coerce_batch(batch, REQ) is batch
    assert coerce_batch([(1, 2), {"seq": 3, "x": 4}], REQ)["seq"].tolist() == [1, 3]
    with pytest.raises(RecordError, match="1-D"):
        coerce_batch(np.zeros((2, 2), REQ), REQ)
    with pytest.raises(RecordError, match="record 1 of the batch"):
        coerce_batch([(1, 2), (1, 2, 3)], REQ)
    with pytest.raises(RecordError, match="sequence of records"):
        coerce_batch(b"abc", REQ)
    with pytest.raises(RecordError, match="larger than"):
        coerce_batch(np.zeros(3, np.dtype([("a", "S64")])), REQ)
    # RecordError is both a TypeError and a ValueError
    assert issubclass(RecordError, TypeError)
    assert issubclass(RecordError, ValueError)


# -- the single-record forms: put_one / take_one --------------------------------------------


@pytest.mark.parametrize("sequenced", [False, True])
def test_put_one_and_take_one_go_round_the_ring_in_order(sequenced: bool) -> None:
    layout = RingLayout(REQ, REP, 3, 2, sequenced_input=sequenced)
    memory = RingMemory.from_buffer(layout)
    host, device = RingHost(memory), RingDevice(memory)
    device.check_header()
    assert host.take_one() is None  # nothing published
    for seq in range(10):  # past both rings' ends, several laps
        as_array = records(seq, 1)
        x = int(as_array["x"][0])
        record = (seq, x) if seq % 3 else as_array[0]  # a tuple or a NumPy record
        assert host.put_one(record)
        assert memory.load64(Offset.IN_HEAD) == seq + 1
        if sequenced:
            assert memory.in_sequences is not None
            assert int(memory.in_sequences[seq % 3]) == seq + 1  # the slot's word, then IN_HEAD
            index, count = device.next_sequenced_batch()
        else:
            index, count = device.next_batch()
        assert (index, count) == (seq, 1)
        device.outputs(index, count)[...] = body(device.inputs(index, count))
        device.publish(count)
        reply = host.take_one()
        assert (int(reply["seq"]), int(reply["y"])) == (seq, x * 3 + 1)
        assert memory.load64(Offset.OUT_TAIL) == seq + 1  # its slot given back
        device.outputs(seq + 1, 1)  # the slot may be overwritten now: the reply is a copy
        assert host.take_one() is None


def test_take_one_copies_a_padded_reply_byte_for_byte() -> None:
    """NumPy copies a record scalar field by field, leaving the copy's padding as the
    allocator left it (this process's heap bytes): take_one copies a padded reply as
    bytes, so its padding is the slot's (zero in a ring slot; a pattern here, so that a
    field-by-field copy cannot pass by chance)."""
    padded = np.dtype([("id", "<u8"), ("flag", "u1")], align=True)  # 7 bytes of padding
    memory = RingMemory.from_buffer(RingLayout(REQ, padded, 2, 2))
    host, device = RingHost(memory), RingDevice(memory)
    device.check_header()
    for seq in range(6):
        assert host.put_one(records(seq, 1)[0])
        index, count = device.next_batch()
        slot = device.outputs(index, count)
        slot.view(np.uint8)[...] = 0x5A  # the padding's bytes
        slot["id"], slot["flag"] = seq, 1
        device.publish(count)
        expected = slot.tobytes()
        reply = host.take_one()
        assert reply.tobytes() == expected
        reply["flag"] = 2  # a copy of its own, writable
        assert int(slot["flag"][0]) == 1


def test_put_one_converts_into_the_slot_and_a_refused_record_publishes_nothing() -> None:
    memory, host, device = make(2)
    with pytest.raises(RecordError, match=r"field 'x'.*1\.7 would lose information"):
        host.put_one((1, 1.7))  # inexact into an integer field: coerce_record's rule
    with pytest.raises(RecordError, match="cannot make"):
        host.put_one((1, 2, 3))  # NumPy refused the tuple: coerce_record says why
    with pytest.raises(RecordError, match="has 2 fields"):
        host.put_one(5)
    with pytest.raises(RecordError, match="is text"):
        host.put_one((1, "2"))  # NumPy would parse it: never a number from text
    assert host.in_head == memory.load64(Offset.IN_HEAD) == 0
    assert device.next_batch() == (0, 0)
    assert host.put_one((1, 2.0))  # exact: converted
    assert host.put_one({"seq": 2, "x": -3})  # any form coerce_record takes
    assert memory.in_slots[:2].tolist() == [(1, 2), (2, -3)]
    assert not host.put_one((3, 4))  # full: nothing converted, nothing written
    assert host.in_head == 2
    assert memory.in_slots[0].tolist() == (1, 2)
    index, count = device.next_batch()
    device.outputs(index, count)[...] = body(device.inputs(index, count))
    device.publish(count)
    assert host.put_one((3, 4))  # IN_TAIL reloaded once the cache says full


@pytest.mark.parametrize("record", [(1,), ()])
def test_put_one_refuses_a_short_tuple_as_coerce_record_does(record: tuple[int, ...]) -> None:
    # A tuple shorter than the dtype's fields skips past an integer field: a RecordError
    # saying so, never an IndexError from the fast case's look at that field.
    memory, host, device = make(2)
    with pytest.raises(RecordError, match="cannot make"):
        host.put_one(record)
    assert host.in_head == memory.load64(Offset.IN_HEAD) == 0
    assert device.next_batch() == (0, 0)
