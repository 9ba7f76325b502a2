"""Messages for ring kernels: the base class, ``@message``, ``Request`` and ``Response``.

Every message carries three fields, all keyword-only with defaults so that a
subclass's own fields may come first and need no default:

* ``message_id`` -- a UUID (version 4) made at construction; unique, not secret;
* ``priority`` -- 0..255, higher is delivered first (default 128); a value outside
  that range is a :class:`ValueError` naming it;
* ``correlation_id`` -- on a reply, the ``message_id`` of the request it answers.

``Request(data=...)`` and ``Response(result=..., correlation_id=...)`` are the
ready-made pair the seed documents use; ``@message`` turns a plain annotated class
into a message dataclass with the three fields added.

Messages travel between actors as objects. For leaving the process, ``serialize()``
turns one into bytes and ``Type.deserialize(data)`` back (the format and its
guarantees: ``_wire``); every message class is registered for that when it is defined.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from ..._exceptions import MessageDeserializationError, MessageSerializationError
from ...lowlevel import DEFAULT_PRIORITY, check_priority
from . import _wire

__all__ = [
    "Message",
    "Request",
    "Response",
    "RingKernelMessage",
    "message",
    "new_message_id",
]

_M = TypeVar("_M")
_Self = TypeVar("_Self", bound="Message")

# A version-4, variant-1 UUID built from 128 random bits without uuid.uuid4()'s
# os.urandom call and UUID.__init__ argument parsing: about 3x cheaper, which matters
# when a kernel makes a reply per message. ``random`` is reseeded in forked children.
_VERSION_MASK = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_VERSION_BITS = (0x4000 << 64) | (0x8000 << 48)
_getrandbits = random.getrandbits
_new_object = object.__new__
_set_attr = object.__setattr__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


def _fast_uuid4() -> uuid.UUID:
    value = _new_object(uuid.UUID)
    _set_attr(value, "int", (_getrandbits(128) & _VERSION_MASK) | _VERSION_BITS)
    _set_attr(value, "is_safe", _SAFE_UNKNOWN)
    return value


def _check_fast_uuid4() -> bool:
    try:
        sample = _fast_uuid4()
        return (
            sample.version == 4
            and sample.variant == uuid.RFC_4122
            and uuid.UUID(str(sample)) == sample
            and hash(sample) == hash(uuid.UUID(int=sample.int))
        )
    except Exception:  # pragma: no cover - a Python whose UUID has another layout
        return False


#: Make a new message id (a random version-4 UUID).
new_message_id: Callable[[], uuid.UUID] = _fast_uuid4 if _check_fast_uuid4() else uuid.uuid4


def _check_message_priority(priority: object) -> None:
    if type(priority) is int and 0 <= priority <= 255:
        return
    check_priority(priority)


@dataclass(slots=True)
class Message:
    """Base class of ring-kernel messages (``RingKernelMessage`` in PyDotCompute).

    Subclass it as a dataclass, or decorate a plain class with :func:`message`.
    """

    message_id: uuid.UUID = field(default_factory=new_message_id, kw_only=True)
    priority: int = field(default=DEFAULT_PRIORITY, kw_only=True)
    correlation_id: uuid.UUID | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        _check_message_priority(self.priority)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Not super(): @dataclass(slots=True) remade this class, so its cell is stale.
        super(Message, cls).__init_subclass__(**kwargs)
        _wire.register(cls)

    def with_correlation(self: _Self, correlation_id: uuid.UUID | None) -> _Self:
        """A copy of this message (same ``message_id``) with ``correlation_id`` set."""
        return dataclasses.replace(self, correlation_id=correlation_id)

    def serialize(self) -> bytes:
        """This message as bytes (JSON of its fields; see :meth:`deserialize`).

        Fields may hold ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
        ``UUID``, lists, tuples, dicts, NumPy arrays and other messages; anything else
        raises :class:`~pdc_core.MessageSerializationError` naming the field.
        """
        try:
            return _wire.encode(self)
        except (TypeError, ValueError, RecursionError) as exc:
            raise MessageSerializationError(type(self), exc) from exc

    @classmethod
    def deserialize(cls: type[_Self], data: bytes | bytearray | memoryview) -> _Self:
        """The message ``serialize()`` made, of this class or a subclass.

        The bytes name the class (its module and qualified name, which must have been
        imported here); building one runs its ``__init__`` and checks, never other
        code. Bad bytes, an unknown class, or one that is not ``cls`` or a subclass
        raise :class:`~pdc_core.MessageDeserializationError`.
        """
        try:
            restored = _wire.decode(data)
        except (TypeError, ValueError, LookupError, RecursionError) as exc:
            raise MessageDeserializationError(cls, exc) from exc
        if not isinstance(restored, cls):
            found = TypeError(f"the bytes hold a {type(restored).__qualname__} message")
            raise MessageDeserializationError(cls, found)
        return restored


_wire.register(Message)

#: PyDotCompute's name for :class:`Message`.
RingKernelMessage = Message


@dataclass(slots=True)
class Request(Message):
    """A request carrying ``data``: ``Request(data=x, priority=255)``."""

    data: Any = None

    def respond(self, result: Any, **fields: Any) -> Response:
        """Return the :class:`Response` to this request (same priority, correlated)."""
        fields.setdefault("priority", self.priority)
        return Response(result=result, correlation_id=self.message_id, **fields)


@dataclass(slots=True)
class Response(Message):
    """A reply carrying ``result``: ``Response(result=r, correlation_id=msg.message_id)``."""

    result: Any = None


@overload
def message(cls: type[_M], /) -> type[_M]: ...


@overload
def message(cls: None = None, /) -> Callable[[type[_M]], type[_M]]: ...


def message(cls: type[_M] | None = None, /) -> type[_M] | Callable[[type[_M]], type[_M]]:
    """Make a message class: a dataclass deriving from :class:`Message`.

    Works with or without parentheses. The class's annotated fields come first in the
    constructor; ``message_id``, ``priority`` and ``correlation_id`` are added as
    keyword-only fields with defaults::

        @message
        class VectorAdd:
            a: float
            b: float

        VectorAdd(1.0, 2.0, priority=200)

    A plain class is rebuilt with :class:`Message` as a base (methods using
    zero-argument ``super()`` should derive from :class:`Message` directly instead).
    """

    def decorate(klass: type[_M]) -> type[_M]:
        if not issubclass(klass, Message):
            namespace = {
                key: value
                for key, value in vars(klass).items()
                if key not in ("__dict__", "__weakref__")
            }
            bases = tuple(base for base in klass.__bases__ if base is not object)
            metaclass: type[Any] = type(klass)
            klass = metaclass(klass.__name__, (Message, *bases), namespace)
        if "__dataclass_fields__" in vars(klass) and dataclasses.is_dataclass(klass):
            return klass
        return dataclass(klass)

    if cls is not None:
        return decorate(cls)
    return decorate
