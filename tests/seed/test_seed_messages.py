"""Messages of the seed API: the base class, ``@message``, ``Request`` and ``Response``."""

from __future__ import annotations

import dataclasses
import pickle
import uuid

import pytest

from pdc_core import Message, Request, Response, RingKernelMessage, message
from pdc_core._seed import new_message_id


def test_request_and_response_fields() -> None:
    request = Request(data=[1, 2], priority=255)
    assert request.data == [1, 2]
    assert request.priority == 255
    assert request.correlation_id is None
    assert isinstance(request.message_id, uuid.UUID)
    response = Response(result=3, correlation_id=request.message_id)
    assert response.correlation_id == request.message_id
    assert response.priority == 128
    reply = request.respond("ok")
    assert (reply.result, reply.correlation_id, reply.priority) == ("ok", request.message_id, 255)
    assert RingKernelMessage is Message


def test_message_ids_are_unique_random_v4_uuids() -> None:
    ids = {new_message_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    sample = next(iter(ids))
    assert sample.version == 4
    assert sample.variant == uuid.RFC_4122
    assert uuid.UUID(str(sample)) == sample
    assert pickle.loads(pickle.dumps(sample)) == sample
    assert Request().message_id != Request().message_id


@pytest.mark.parametrize("bad", [-1, 256])
def test_priority_is_checked_at_construction(bad: int) -> None:
    with pytest.raises(ValueError, match=str(bad)):
        Request(priority=bad)


def test_message_decorator_adds_the_fields_after_the_class_fields() -> None:
    @message
    class VectorAdd:
        a: float
        b: float = 2.0

        def total(self) -> float:
            return self.a + self.b

    msg = VectorAdd(1.0, priority=200)
    assert isinstance(msg, Message)
    assert dataclasses.is_dataclass(msg)
    assert (msg.a, msg.b, msg.priority, msg.total()) == (1.0, 2.0, 200, 3.0)
    assert isinstance(msg.message_id, uuid.UUID)
    assert VectorAdd.__name__ == "VectorAdd"
    with pytest.raises(ValueError, match="999"):
        VectorAdd(1.0, priority=999)


def test_message_decorator_with_parentheses_and_on_a_subclass() -> None:
    @message()
    class Ping:
        n: int = 0

    @message
    @dataclasses.dataclass
    class Pong(Message):
        n: int = 0

    assert Ping(n=1).n == 1
    assert Pong(n=2).priority == 128


# -- bytes: serialize() / deserialize() ----------------------------------------------


@message
class Reading:
    sensor: str
    values: list[float]
    raw: bytes = b""
    extra: dict[object, object] = dataclasses.field(default_factory=dict)


def test_a_message_round_trips_through_bytes_with_every_value_kind() -> None:
    import numpy as np

    inner = Response(result=(1, "two", None), correlation_id=uuid.uuid4())
    original = Reading(
        "t1",
        [1.5, float("inf")],
        raw=b"\x00\xff",
        extra={
            1: inner,  # a key that is not a string, a nested message
            "$tag": np.arange(6, dtype=np.int16).reshape(2, 3),  # a key that looks like a tag
            "scalar": np.float32(2.5),
            "id": uuid.uuid4(),
            "plain": {"a": [True, False]},
        },
        priority=7,
    )
    data = original.serialize()
    assert isinstance(data, bytes)
    restored = Reading.deserialize(data)
    assert type(restored) is Reading
    assert (restored.message_id, restored.priority) == (original.message_id, 7)
    assert restored.extra[1] == inner
    assert restored.extra["scalar"] == np.float32(2.5)
    assert restored.extra["scalar"].dtype == np.float32
    array = restored.extra["$tag"]
    np.testing.assert_array_equal(array, original.extra["$tag"])
    assert array.dtype == np.int16
    assert array.flags.writeable
    assert restored.raw == b"\x00\xff"
    assert (restored.values, restored.extra["id"], restored.extra["plain"]) == (
        original.values,
        original.extra["id"],
        {"a": [True, False]},
    )
    again = Message.deserialize(data)  # the base class finds the subclass
    assert type(again) is Reading
    assert again.message_id == original.message_id


def test_with_correlation_copies_the_message() -> None:
    request = Request(data=1)
    reply_to = uuid.uuid4()
    copy = request.with_correlation(reply_to)
    assert (copy.message_id, copy.correlation_id, copy.data) == (request.message_id, reply_to, 1)
    assert request.correlation_id is None


def test_what_has_no_wire_form_is_refused_naming_the_field() -> None:
    from pdc_core import MessageSerializationError

    with pytest.raises(MessageSerializationError, match=r"field data\[0\] holds a object"):
        Request(data=[object()]).serialize()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "Expecting value"),
        (b"\xff", "utf-8"),
        (b"[1]", "no message"),
        (b'{"$message": "nowhere:Gone", "fields": {}}', "unknown message type 'nowhere:Gone'"),
        (b'{"$message": "pdc_core:Request", "fields": {"priority": 999}}', "999"),
        (b'{"$message": "pdc_core:Request", "fields": {"data": {"$eval": 1}}}', "'$eval'"),
        (b'{"$message": "pdc_core:Request", "fields": {"data": {"$uuid": 123}}}', "$uuid"),
        (b'{"$message": "pdc_core:Request", "fields": {"data": {"$uuid": []}}}', "$uuid"),
        (
            b'{"$message": "pdc_core:Request", "fields": {"data": {"$array": '
            b'{"dtype": "|O", "shape": [1], "data": "", "scalar": false}}}}',
            "Python objects",
        ),
    ],
)
def test_bad_bytes_are_a_deserialization_error(data: bytes, fragment: str) -> None:
    from pdc_core import MessageDeserializationError

    with pytest.raises(MessageDeserializationError, match="Request") as info:
        Request.deserialize(data)
    assert fragment in str(info.value)


def test_bytes_of_another_class_are_refused() -> None:
    from pdc_core import MessageDeserializationError

    with pytest.raises(MessageDeserializationError, match="hold a Response message"):
        Request.deserialize(Response(result=1).serialize())
