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
