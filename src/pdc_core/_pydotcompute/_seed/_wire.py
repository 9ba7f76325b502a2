"""Messages as bytes: the format of ``Message.serialize`` and ``Message.deserialize``.

pdc passes messages between actors as objects; bytes are for leaving the process (a
socket, a file, another language). A message becomes UTF-8 JSON::

    {"$message": "<module>:<qualified name>", "fields": {<its __init__ fields>}}

Field values are JSON's own (``None``, ``bool``, ``int``, ``float`` -- NaN and the
infinities included --, ``str``, ``list``, ``dict`` with string keys) or one-key tagged
objects for the rest: ``{"$uuid": "..."}``, ``{"$bytes": "<base64>"}``,
``{"$tuple": [...]}``, ``{"$dict": [[key, value], ...]}`` (a dict with a key that is not
a string or starts with ``$``), ``{"$array": {"dtype", "shape", "data", "scalar"}}``
for NumPy arrays and scalars, and nested messages. Anything else is refused with
:class:`~pdc_core.MessageSerializationError` naming the field.

An array's ``dtype`` is NumPy's full description (``numpy.lib.format``'s descr): a
type string such as ``"<f4"``, or for a structured dtype the list of its fields, so
records come back with their fields, offsets and size.

Guarantees: ``type(m).deserialize(m.serialize()) == m`` for every message whose fields
hold those values (lists come back as lists, tuples as tuples, arrays as writable
arrays of the same dtype and shape). Decoding builds only message classes that were
registered in this process and the value types above, so, unlike pickle, bytes from
an untrusted peer cannot run code; a class is found by its module and qualified name
(the receiving process must have imported the module that defines it). Bad bytes are a
:class:`~pdc_core.MessageDeserializationError`, never another exception.

The decoder accepts only what the encoder writes: a duplicate key anywhere, a message
object with keys other than ``$message`` and ``fields``, a ``message_id`` that is not
a ``$uuid`` (or a ``correlation_id`` that is neither one nor ``null``), a ``$uuid``
not in canonical form, a ``$tuple`` or ``$dict`` that is not a list (of pairs), and
an ``$array`` whose shape is not a list of non-negative ints, whose data does not
fill exactly that shape, or that is a ``scalar`` of more than zero dimensions are
refused, each naming the problem. So a peer cannot hand a kernel an id it cannot
hash, nor bytes that decode differently from how they would encode.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import uuid
import weakref
from typing import Any

import numpy as np

__all__ = ["decode", "encode", "message_type", "register"]

#: Every message class; by its bare name (the latest class wins); by its wire name.
_classes: weakref.WeakSet[type] = weakref.WeakSet()
_by_name: weakref.WeakValueDictionary[str, type] = weakref.WeakValueDictionary()
_by_key: weakref.WeakValueDictionary[str, type] = weakref.WeakValueDictionary()


def _key(cls: type) -> str:
    # Read when used: pdc gives its own classes their public module after defining them.
    return f"{cls.__module__}:{cls.__qualname__}"


def register(cls: type) -> None:
    """Make ``cls`` findable by its bare name and its wire name (the latest class wins)."""
    _classes.add(cls)
    _by_name[cls.__name__] = cls


def _find(key: str) -> type | None:
    found = _by_key.get(key)
    if found is None or _key(found) != key:
        for cls in _classes:  # defined since the last look, or moved to a public module
            _by_key[_key(cls)] = cls
        found = _by_key.get(key)
    return found


def message_type(name: str) -> type | None:
    """The message class last defined with this bare name or wire name, or ``None``."""
    return _by_name.get(name) or _find(name)


def encode(message: object) -> bytes:
    """``message`` as bytes; ``TypeError``/``ValueError`` naming the field that has no
    wire form (the caller wraps it)."""
    return json.dumps(_message(message), separators=(",", ":")).encode()


def _message(message: object) -> dict[str, Any]:
    fields = {
        field.name: _value(getattr(message, field.name), field.name)
        for field in dataclasses.fields(message)  # type: ignore[arg-type]  # a message
        if field.init
    }
    return {"$message": _key(type(message)), "fields": fields}


def _value(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [_value(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, tuple):
        return {"$tuple": [_value(item, f"{where}[{i}]") for i, item in enumerate(value)]}
    if isinstance(value, dict):
        if all(isinstance(key, str) and not key.startswith("$") for key in value):
            return {key: _value(item, f"{where}[{key!r}]") for key, item in value.items()}
        pairs = [
            [_value(key, f"{where} key"), _value(item, f"{where}[{key!r}]")]
            for key, item in value.items()
        ]
        return {"$dict": pairs}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError(f"field {where} is a NumPy array of Python objects")
        data = base64.b64encode(array.tobytes()).decode("ascii")
        scalar = isinstance(value, np.generic)
        return {
            "$array": {
                # The full description: dtype.str of a record is bare bytes ("|V16").
                "dtype": np.lib.format.dtype_to_descr(array.dtype),
                "shape": list(array.shape),
                "data": data,
                "scalar": scalar,
            }
        }
    if type(value) in _classes:
        return _message(value)
    raise TypeError(
        f"field {where} holds a {type(value).__qualname__}, which has no wire form "
        "(messages carry None, bool, int, float, str, bytes, UUID, list, tuple, dict, "
        "NumPy arrays and other messages)"
    )


def decode(data: bytes | bytearray | memoryview) -> object:
    """The message in ``data``; ``ValueError``/``TypeError``/``LookupError`` saying
    what is wrong with the bytes (the caller wraps it)."""
    document = json.loads(bytes(data).decode("utf-8"), object_pairs_hook=_unique_keys)
    if not (isinstance(document, dict) and "$message" in document):
        raise ValueError("the bytes hold no message")
    return _restore(document)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):  # the encoder never writes a key twice
        keys = [key for key, _ in pairs]
        duplicate = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"duplicate key {duplicate!r} in an object")
    return value


#: A message's id fields: the UUID the encoder writes, or for a reference ``None``.
_ID_FIELDS = {"message_id": False, "correlation_id": True}


def _restore(value: Any) -> Any:
    if isinstance(value, list):
        return [_restore(item) for item in value]
    if not isinstance(value, dict):
        return value
    if "$message" in value:
        return _restore_message(value)
    tags = [key for key in value if key.startswith("$")]
    if not tags:
        return {key: _restore(item) for key, item in value.items()}
    if len(value) != 1:
        raise ValueError(f"a tagged value has other keys: {sorted(value)}")
    tag, content = tags[0], value[tags[0]]
    if tag == "$uuid":
        if not isinstance(content, str):  # uuid.UUID(123) is an AttributeError
            raise TypeError(f"a $uuid value must be a string, not {content!r}")
        parsed = uuid.UUID(content)
        if str(parsed) != content:  # braces, a urn: prefix, capitals: never written
            raise ValueError(f"a $uuid value must be a UUID in canonical form, not {content!r}")
        return parsed
    if tag == "$bytes":
        if not isinstance(content, str):
            raise TypeError(f"a $bytes value must be a base64 string, not {content!r}")
        return base64.b64decode(content, validate=True)
    if tag == "$tuple":
        if not isinstance(content, list):  # a str or an object would be read item by item
            raise TypeError(f"a $tuple value must be a list, not {content!r}")
        return tuple(_restore(item) for item in content)
    if tag == "$dict":
        if not (
            isinstance(content, list)
            and all(isinstance(pair, list) and len(pair) == 2 for pair in content)
        ):
            raise TypeError(f"a $dict value must be a list of [key, value] pairs, not {content!r}")
        return {_restore(key): _restore(item) for key, item in content}
    if tag == "$array":
        return _restore_array(content)
    raise ValueError(f"unknown tag {tag!r}")


def _restore_message(value: dict[str, Any]) -> object:
    name = value["$message"]
    if set(value) != {"$message", "fields"}:
        raise ValueError(f"a message object has keys {sorted(value)}, not $message and fields")
    cls = _find(name) if isinstance(name, str) else None
    if cls is None:
        raise LookupError(f"unknown message type {name!r}: import the module that defines it first")
    fields = value["fields"]
    if not isinstance(fields, dict):
        raise ValueError(f"the fields of a {name} message are not an object")
    restored = {key: _restore(item) for key, item in fields.items()}
    for key, may_be_none in _ID_FIELDS.items():
        # A kernel hashes these ids to route replies: a list here would crash it.
        if key in restored and not (
            type(restored[key]) is uuid.UUID or (may_be_none and restored[key] is None)
        ):
            expected = "a UUID or null" if may_be_none else "a UUID"
            raise TypeError(
                f"the {key} of a {name} message must be {expected}, not {fields[key]!r}"
            )
    return cls(**restored)


def _restore_array(content: Any) -> Any:
    if not (isinstance(content, dict) and set(content) == {"dtype", "shape", "data", "scalar"}):
        raise ValueError(
            f"an $array value must hold dtype, shape, data and scalar, not {content!r}"
        )
    shape = content["shape"]
    if not (isinstance(shape, list) and all(type(size) is int and size >= 0 for size in shape)):
        raise ValueError(f"an $array shape must be a list of non-negative ints, not {shape!r}")
    scalar = content["scalar"]
    if type(scalar) is not bool or (scalar and shape):
        raise ValueError(f"an $array of shape {shape} cannot be scalar={scalar!r}")
    if not isinstance(content["data"], str):
        raise TypeError("an $array's data must be a base64 string")
    try:
        dtype = np.lib.format.descr_to_dtype(_descr(content["dtype"]))
    except (TypeError, ValueError, LookupError) as error:
        raise ValueError(
            f"an $array's dtype {content['dtype']!r} is not a NumPy description ({error})"
        ) from None
    if dtype.hasobject:
        raise ValueError("an array of Python objects has no wire form")
    raw = base64.b64decode(content["data"], validate=True)
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise ValueError(
            f"an $array of shape {shape} and dtype {dtype} holds {len(raw)} bytes, "
            f"not {math.prod(shape) * dtype.itemsize}"
        )
    array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return array[()] if scalar else array


def _descr(value: Any) -> Any:
    """A dtype description read from JSON with its tuples back: a field's (title,
    name) pair and its shape were written as lists."""
    if not isinstance(value, list):
        return value
    fields = []
    for entry in value:
        if not (isinstance(entry, list) and len(entry) in (2, 3)):
            raise ValueError(
                f"a field of a dtype description must be [name, type(, shape)], not {entry!r}"
            )
        name, *rest = entry
        named = tuple(name) if isinstance(name, list) else name
        rest[0] = _descr(rest[0])
        if len(rest) == 2:
            rest[1] = tuple(rest[1]) if isinstance(rest[1], list) else rest[1]
        fields.append((named, *rest))
    return fields
