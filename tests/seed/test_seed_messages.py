"""Messages of the seed API: the base class, ``@message``, ``Request`` and ``Response``."""

from __future__ import annotations

import dataclasses
import pickle
import uuid

import pytest

from pdc_core import Message, Request, Response, RingKernelMessage, message
from pdc_core._pydotcompute._seed import new_message_id


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


_REQUEST = '{"$message": "pdc_core:Request", "fields": {%s}}'
_ARRAY = '"data": {"$array": {"dtype": "<i2", "shape": %s, "data": "%s", "scalar": %s}}'


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        # ids a kernel hashes to route replies (issue 40, item 3)
        (_REQUEST % '"message_id": [1]', "message_id of a pdc_core:Request message must be a UUID"),
        (_REQUEST % '"message_id": "0b4c"', "must be a UUID, not '0b4c'"),
        (_REQUEST % '"message_id": null', "must be a UUID, not None"),
        (_REQUEST % '"correlation_id": {"a": 1}', "correlation_id of a pdc_core:Request"),
        (_REQUEST % '"correlation_id": 7', "must be a UUID or null, not 7"),
        # what the encoder never writes (item 4)
        (_REQUEST % '"data": {"a": 1, "a": 2}', "duplicate key 'a'"),
        (
            '{"$message": "pdc_core:Request", "$message": "pdc_core:Response", "fields": {}}',
            "duplicate key '$message'",
        ),
        (
            '{"$message": "pdc_core:Request", "fields": {}, "x": 1}',
            "keys ['$message', 'fields', 'x']",
        ),
        (_REQUEST % '"data": {"$tuple": "abc"}', "a $tuple value must be a list, not 'abc'"),
        (_REQUEST % '"data": {"$tuple": {"a": 1}}', "a $tuple value must be a list"),
        (_REQUEST % '"data": {"$dict": [[1, 2, 3]]}', "a $dict value must be a list of [key"),
        (_REQUEST % '"data": {"$bytes": 5}', "a $bytes value must be a base64 string"),
        (
            _REQUEST % '"data": {"$uuid": "{12345678-1234-5678-1234-567812345678}"}',
            "a $uuid value must be a UUID in canonical form",
        ),
        (
            _REQUEST % '"message_id": {"$uuid": "12345678-1234-5678-1234-56781234567A"}',
            "canonical form",
        ),
        (_REQUEST % (_ARRAY % ("[-1]", "", "false")), "shape must be a list of non-negative"),
        (_REQUEST % (_ARRAY % ("[true]", "AAA=", "false")), "shape must be a list of non-negative"),
        (_REQUEST % (_ARRAY % ("[3]", "AAA=", "false")), "holds 2 bytes, not 6"),
        (_REQUEST % (_ARRAY % ("[1]", "AAA=", "true")), "shape [1] cannot be scalar=True"),
        (_REQUEST % (_ARRAY % ("[]", "AAA=", "1")), "cannot be scalar=1"),
        (
            _REQUEST % '"data": {"$array": {"dtype": "<i2", "shape": [], "data": "AAA="}}',
            "must hold dtype, shape, data and scalar",
        ),
        (
            _REQUEST % '"data": {"$array": {"dtype": [["a"]], "shape": [], "data": "", '
            '"scalar": true}}',
            "is not a NumPy description",
        ),
    ],
)
def test_the_decoder_refuses_what_the_encoder_never_writes(document: str, fragment: str) -> None:
    from pdc_core import MessageDeserializationError

    with pytest.raises(MessageDeserializationError) as info:
        Request.deserialize(document.encode())
    assert fragment in str(info.value)


def test_a_nested_message_s_ids_are_checked_too() -> None:
    from pdc_core import MessageDeserializationError

    inner = '{"$message": "pdc_core:Response", "fields": {"correlation_id": [1]}}'
    with pytest.raises(MessageDeserializationError, match="correlation_id of a pdc_core:Response"):
        Request.deserialize((_REQUEST % f'"data": {inner}').encode())


def test_what_the_encoder_writes_still_decodes_with_its_ids() -> None:
    reply = Response(result=(1,), correlation_id=uuid.uuid4())
    assert Response.deserialize(reply.serialize()) == reply
    assert Request.deserialize(Request(data=[Request()]).serialize()).data[0].correlation_id is None


def test_structured_arrays_come_back_with_their_fields() -> None:
    import numpy as np

    record = np.dtype(
        [("id", "<u4"), ("xyz", "<f4", (3,)), ("inner", [("flag", "u1")])], align=True
    )
    titled = np.dtype([(("a title", "a"), "<i4"), ("b", "V3")])
    for dtype in (record, titled, np.dtype("V5")):
        array = np.zeros(4, dtype)
        array.view(np.uint8)[:] = np.arange(array.nbytes, dtype=np.uint8)
        restored = Request.deserialize(Request(data=array).serialize()).data
        assert (restored.dtype, restored.dtype.names, restored.shape) == (
            dtype,
            dtype.names,
            (4,),
        )
        assert restored.tobytes() == array.tobytes()
        scalar = Request.deserialize(Request(data=array[1]).serialize()).data
        assert scalar.dtype == dtype
        assert repr(scalar.tolist()) == repr(array[1].tolist())  # the fields, not padding
