"""The ring's roles: the host end (``RingHost``) is the one writer of the host's words.

``IN_HEAD``, ``OUT_TAIL``, ``STOP`` and ``PAUSE`` are stored only by
``pdc_core/_backend/_ring/_host.py``: the session's records, a link producer's
``commit``, a resident kernel's stop/pause/resume (through its ``ring``) and the
emergency ``force_stop`` of a failed launch. The source scan below holds it for pdc and
every plugin; the other tests show that each role does what the stores did.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import pdc_core
from pdc_core.backend import (
    Offset,
    ResidentKernel,
    RingDevice,
    RingHost,
    RingLayout,
    RingMemory,
    StopMode,
)

SRC = Path(pdc_core.__file__).parent
ROOT = Path(__file__).parents[2]
HOST_END = SRC / "_backend" / "_ring" / "_host.py"
HOST_WORDS = {"IN_HEAD", "OUT_TAIL", "STOP", "PAUSE"}
#: A RingHost's own indices, equal to the words it stores.
HOST_INDICES = {"in_head", "out_tail"}

REQ = np.dtype([("seq", "<u8"), ("x", "<i4")], align=True)
REP = np.dtype([("seq", "<u8"), ("y", "<i8")], align=True)


def _names_a_host_word(node: ast.AST) -> bool:
    return any(
        isinstance(sub, ast.Attribute)
        and sub.attr in HOST_WORDS
        and isinstance(sub.value, ast.Name)
        and sub.value.id == "Offset"
        for sub in ast.walk(node)
    )


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for target in node.targets:
            found.extend(ast.walk(target))  # type: ignore[arg-type]  # tuple targets too
        return found
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def host_word_stores(source: str) -> list[str]:
    """Where ``source`` stores a host word: an item assignment whose index names
    ``Offset.IN_HEAD``/``OUT_TAIL``/``STOP``/``PAUSE``, a call of a ``store``/``write``
    method given such an offset, or an assignment to an ``in_head``/``out_tail``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if isinstance(target, ast.Subscript) and _names_a_host_word(target.slice):
                found.append(f"line {getattr(node, 'lineno', 0)}: item store")
            elif isinstance(target, ast.Attribute) and target.attr in HOST_INDICES:
                found.append(f"line {getattr(node, 'lineno', 0)}: .{target.attr} assigned")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr.lower()
            arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
            if ("store" in name or "write" in name) and any(map(_names_a_host_word, arguments)):
                found.append(f"line {node.lineno}: {node.func.attr}(...)")
    return found


def _sources() -> list[Path]:
    files = sorted(SRC.rglob("*.py")) + sorted((ROOT / "plugins").glob("*/src/**/*.py"))
    return [path for path in files if path != HOST_END]


def test_the_scan_finds_every_way_the_host_words_were_stored() -> None:
    # The stores this rule replaced: the links' commit, the emergency stops of
    # _links.py and pdc-cuda, ResidentKernel's helper, a copy into device memory.
    planted = """
host.in_head = head
self._w64[Offset.IN_HEAD >> 3] = head
words[Offset.STOP >> 2] = int(StopMode.NOW)
rings.words32[Offset.STOP >> 2], x = 1, 2
self._store32(Offset.PAUSE, 1)
self.site.place.write(self.device_array, word, int(Offset.STOP))
memory.words64[Offset.OUT_TAIL // 8] += 1
"""
    assert len(host_word_stores(planted)) == 7
    # Loads, and stores of the kernel's words, are not host-word stores.
    fine = """
stop = int(self._w32[Offset.STOP >> 2])
self._w64[Offset.IN_TAIL >> 3] = tail
head = host.in_head
"""
    assert host_word_stores(fine) == []


@pytest.mark.parametrize("path", _sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_only_the_host_end_stores_a_host_word(path: Path) -> None:
    assert host_word_stores(path.read_text()) == []


def test_the_host_end_does_store_them() -> None:
    assert len(host_word_stores(HOST_END.read_text())) >= 6  # the scan sees the real ones


def _region(sequenced: bool = False) -> RingMemory:
    return RingMemory.from_buffer(RingLayout(REQ, REP, 4, sequenced_input=sequenced))


def test_commit_publishes_slots_written_in_place() -> None:
    memory = _region()
    host, device = RingHost(memory), RingDevice(memory)
    assert host.free_slots() == 4
    memory.in_slots[0:3]["seq"] = [7, 8, 9]  # a producer writes into its slots
    host.commit(3)
    assert (host.in_head, memory.load64(Offset.IN_HEAD)) == (3, 3)
    index, count = device.next_batch()
    assert device.inputs(index, count)["seq"].tolist() == [7, 8, 9]
    host.commit(0)
    assert memory.load64(Offset.IN_HEAD) == 3


def test_commit_refuses_more_than_is_free_and_a_sequenced_ring() -> None:
    memory = _region()
    host = RingHost(memory)
    with pytest.raises(ValueError, match="cannot commit 5 requests: 4 slots are free"):
        host.commit(5)
    with pytest.raises(ValueError, match="cannot commit -1"):
        host.commit(-1)
    assert (host.in_head, memory.load64(Offset.IN_HEAD)) == (0, 0)  # nothing stored
    with pytest.raises(ValueError, match="sequence words"):
        RingHost(_region(sequenced=True)).commit(1)


def test_force_stop_stores_stop_now_whatever_was_asked() -> None:
    memory = _region()
    host = RingHost(memory)
    host.request_stop(StopMode.DRAIN)
    RingHost.force_stop(memory)
    assert RingDevice(memory).stop_mode() is StopMode.NOW
    offset, word = RingHost.force_stop_word()
    image = _region()
    image.base[offset : offset + word.nbytes] = word.view(np.uint8)  # as a copy would
    assert RingDevice(image).stop_mode() is StopMode.NOW


class _Handle(ResidentKernel):
    def __init__(self, memory: RingMemory) -> None:
        super().__init__(None, None, memory)  # type: ignore[arg-type]
        self.bells = 0

    def wake(self) -> None:
        self.bells += 1

    @property
    def exited(self) -> bool:
        return False


def test_a_resident_kernel_asks_its_host_end_for_control() -> None:
    memory = _region()
    resident = _Handle(memory)
    ring = resident.ring
    assert isinstance(ring, RingHost)
    assert resident.ring is ring
    device = RingDevice(memory)
    resident.pause()
    assert device.pause_requested()
    assert resident.bells == 1
    resident.resume()
    assert not device.pause_requested()
    assert resident.bells == 2
    resident.request_stop(StopMode.DRAIN)
    resident.request_stop(StopMode.NOW)
    resident.request_stop(StopMode.DRAIN)  # NOW wins over a later DRAIN
    assert device.stop_mode() is StopMode.NOW
    assert ring.stop_requested is StopMode.NOW
    assert resident.bells == 5
