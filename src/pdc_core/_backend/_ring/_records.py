"""Records: what the host accepts as a request and how records are copied.

:func:`coerce_record` and :func:`coerce_batch` turn what a caller gives into records of
a ring's dtype, refusing (with :class:`~pdc_core.RecordError`) anything that would be
guessed or lose data; :func:`copy_records` and :func:`records_copy` copy records with
the fewest calls; :func:`describe_dtype` names a dtype in errors.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ..._exceptions import RecordError
from ._layout import _BYTE


def _short_type(dtype: np.dtype[Any]) -> str:
    if dtype.names is not None:
        return describe_dtype(dtype)
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return f"{_short_type(base)}{list(shape)}"
    return dtype.str.lstrip("<|=")  # '<f8' -> 'f8'; a big-endian '>f8' keeps its mark


def describe_dtype(dtype: np.dtype[Any]) -> str:
    """A record dtype as messages print it: a short field list, ``[id: u8, x: f8[3]]``.

    NumPy's own ``str`` of an aligned structured dtype is a dict of names, formats,
    offsets and item size; this says what a reader needs to fix a record. Padding shows
    only where it is the difference: see :func:`describe_dtypes`.
    """
    if dtype.names is None:
        return _short_type(dtype)
    fields = dtype.fields
    assert fields is not None
    return "[" + ", ".join(f"{name}: {_short_type(fields[name][0])}" for name in dtype.names) + "]"


def describe_dtypes(first: np.dtype[Any], second: np.dtype[Any]) -> tuple[str, str]:
    """Two dtypes that differ, for one message: short field lists, each followed by its
    layout (item size and field offsets) when the field lists alone are the same (one
    built with ``align=True``, the other without, say)."""
    texts = describe_dtype(first), describe_dtype(second)
    if texts[0] != texts[1]:
        return texts
    return _with_layout(first), _with_layout(second)


def _with_layout(dtype: np.dtype[Any]) -> str:
    fields = dtype.fields
    offsets = [fields[name][1] for name in dtype.names or ()] if fields else []
    return f"{describe_dtype(dtype)} ({dtype.itemsize} bytes, offsets {offsets})"


def _dtype_mismatch(got: np.dtype[Any], want: np.dtype[Any], what: str) -> RecordError:
    got_text, want_text = describe_dtypes(got, want)
    if got.itemsize > want.itemsize:
        return RecordError(
            f"a {what} record of {got.itemsize} bytes (dtype {got_text}) is larger "
            f"than a {want.itemsize}-byte slot (the ring's record dtype is {want_text})"
        )
    return RecordError(
        f"a {what} record has dtype {got_text}, but the ring's record dtype is {want_text}"
    )


def coerce_record(value: Any, dtype: np.dtype[Any], what: str = "request") -> npt.NDArray[Any]:
    """Turn one record into a 1-element array of ``dtype``, or raise :class:`RecordError`.

    Accepted: a NumPy array or scalar of exactly ``dtype`` holding one record (shape
    ``()`` or ``(1,)``); a ``bytes``-like payload of at most one slot (zero-padded); a
    tuple, a mapping of field names, or a Python scalar NumPy can convert to
    ``dtype``. Arrays of another dtype are refused rather than cast, and the message
    names both dtypes, or both sizes when the record is larger than a slot. Nothing
    is written anywhere: call this before touching a ring.

    Nothing is guessed: a Python scalar is a record only of a dtype with one field (or
    none), and a number that a cast would change (1.7 into an integer field) is refused
    naming the field; exact conversions (2.0 into an integer field) are made.
    """
    is_tuple = type(value) is tuple
    if is_tuple:  # the common case first: field values
        pass
    elif isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype != dtype:
            raise _dtype_mismatch(array.dtype, dtype, what)
        if array.shape not in ((), (1,)):
            raise RecordError(
                f"expected one {what} record, got an array of shape {array.shape}; "
                "send several records as a batch"
            )
        return array.reshape(1)
    if isinstance(value, bytes | bytearray | memoryview):
        payload = memoryview(value).cast("B")
        if payload.nbytes > dtype.itemsize:
            raise RecordError(
                f"a {what} payload of {payload.nbytes} bytes is larger than a "
                f"{dtype.itemsize}-byte slot (record dtype {describe_dtype(dtype)})"
            )
        raw = np.zeros(dtype.itemsize, dtype=_BYTE)
        raw[: payload.nbytes] = np.frombuffer(payload, dtype=_BYTE)
        return raw.view(dtype)
    elif isinstance(value, Mapping):
        value = record_from_mapping(value, dtype, what)
    plan = _plans.get(id(dtype)) or _plan(dtype)
    if plan[1] and not is_tuple and not isinstance(value, tuple | list):
        # NumPy would copy the scalar into every field: a guess, never what was meant.
        names = dtype.names
        assert names is not None
        raise RecordError(
            f"{value!r} is not a {what} record of dtype {describe_dtype(dtype)}: it has "
            f"{len(names)} fields "
            f"({', '.join(names)}); give a tuple of field values or a mapping of field "
            "names (a scalar is a record only of a one-field dtype)"
        )
    if is_tuple or isinstance(value, list):
        for item in value:
            if type(item) not in _PLAIN_NUMBERS:  # the common case costs one look per field
                _refuse_text(value, dtype, dtype, None, what)
                break
    elif type(value) not in _PLAIN_NUMBERS:
        _refuse_text(value, dtype, dtype, None, what)
    try:
        array = np.array([value], dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RecordError(
            f"cannot make a {what} record of dtype {describe_dtype(dtype)} from {value!r}: {exc}"
        ) from None
    if array.shape != (1,):
        raise RecordError(
            f"{value!r} is not one {what} record of dtype {describe_dtype(dtype)} "
            f"(it converts to shape {array.shape[1:]})"
        )
    integer_fields = plan[2]
    if integer_fields:
        if is_tuple:  # plain ints need no check (NumPy range-checks them)
            for position, _ in integer_fields:
                if position < len(value) and type(value[position]) is not int:
                    _check_exact(value, array, dtype, integer_fields, what)
                    break
        else:
            _check_exact(value, array, dtype, integer_fields, what)
    return array


#: Values that are numbers and nothing else: no text to look for in them.
_PLAIN_NUMBERS: Final = frozenset({int, float, bool, complex})


def _refuse_text(
    value: Any, field: np.dtype[Any], dtype: np.dtype[Any], name: str | None, what: str
) -> None:
    """Refuse text (``str``, ``bytes``) bound for a number of ``field`` (the record's
    ``dtype`` or a field ``name`` of it, nested fields and subarrays included): NumPy
    would parse ``"2.0"`` into a float field, and a record is never guessed at."""
    if field.names is not None:
        fields = field.fields
        assert fields is not None
        if isinstance(value, tuple | list):
            for key, item in zip(field.names, value, strict=False):
                _refuse_text(item, fields[key][0], dtype, key, what)
        elif len(field.names) == 1:  # a scalar is the record of a one-field dtype
            key = field.names[0]
            _refuse_text(value, fields[key][0], dtype, key, what)
        return
    if isinstance(value, tuple | list):  # a subarray field's elements
        for item in value:
            _refuse_text(item, field.base, dtype, name, what)
        return
    is_text = isinstance(value, str | bytes) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "SU"
    )
    if is_text and field.base.kind in "biufc":
        where = f"a {what} record of dtype {describe_dtype(dtype)}"
        if name is not None:
            where = f"field {name!r} ({field}) of {where}"
        raise RecordError(
            f"{where}: {value!r} is text, and text is never parsed into a number; "
            "give the number itself"
        )


_IntegerFields = tuple[tuple[int, str | None], ...]
#: What coerce_record needs to know of a dtype: the dtype itself (kept alive, so its id
#: is not reused while cached), whether it has several fields, and its integer fields.
_Plan = tuple[np.dtype[Any], bool, _IntegerFields]

# Plans by the dtype object's identity (hashing a structured dtype costs more than the
# whole check): a kernel's dtype is one object, used for every record.
_plans: dict[int, _Plan] = {}


def _plan(dtype: np.dtype[Any]) -> _Plan:
    """Make and cache ``dtype``'s plan. Its integer fields are the integer and bool
    fields (position and name; ``None`` for an unstructured integer dtype): where a
    cast can lose what a Python value held."""
    if dtype.names is None:
        found: _IntegerFields = ((0, None),) if dtype.base.kind in "iub" else ()
    else:
        fields = dtype.fields
        assert fields is not None
        found = tuple(
            (position, name)
            for position, name in enumerate(dtype.names)
            if fields[name][0].base.kind in "iub"
        )
    plan = (dtype, dtype.names is not None and len(dtype.names) > 1, found)
    if len(_plans) >= 256:
        _plans.clear()
    _plans[id(dtype)] = plan
    return plan


def _check_exact(
    value: Any,
    array: npt.NDArray[Any],
    dtype: np.dtype[Any],
    integer_fields: _IntegerFields,
    what: str,
) -> None:
    """Refuse a non-integral number (1.7) cast into an integer or bool field, where
    NumPy would silently truncate it; exact values (2.0, ``True``) pass."""
    for position, name in integer_fields:
        if name is None or not isinstance(value, tuple | list):
            item = value  # an unstructured dtype's value, or a one-field dtype's
        elif position < len(value):
            item = value[position]
        else:
            continue  # NumPy refused a short tuple already
        if type(item) is int or isinstance(item, bool | np.integer | np.bool_):
            continue  # NumPy range-checks integers itself
        converted = array[0] if name is None else array[0][name]
        try:
            original = np.asarray(item)
        except Exception:  # NumPy converted it already: nothing to compare
            continue
        if original.dtype.kind not in "fc":
            continue
        with np.errstate(invalid="ignore"):
            exact = original.shape == np.shape(converted) and bool(np.all(original == converted))
        if not exact:
            if name is None:
                where = f"a {what} record of dtype {describe_dtype(dtype)}"
            else:
                fields = dtype.fields
                assert fields is not None
                where = (
                    f"field {name!r} ({fields[name][0]}) of a {what} record "
                    f"of dtype {describe_dtype(dtype)}"
                )
            raise RecordError(
                f"{where}: {item!r} would lose information cast into it (it would become "
                f"{converted!r}); round it yourself if that is meant"
            )


def record_from_mapping(
    value: Mapping[str, Any], dtype: np.dtype[Any], what: str
) -> tuple[Any, ...]:
    """The field values of ``value`` (a mapping of field names) in ``dtype``'s order.

    Raises :class:`~pdc_core.RecordError` naming missing and unknown fields.
    """
    names = dtype.names
    if names is None:
        raise RecordError(
            f"a mapping cannot be a {what} record of the unstructured dtype {describe_dtype(dtype)}"
        )
    missing = [name for name in names if name not in value]
    extra = [name for name in value if name not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing field(s) {', '.join(missing)}")
        if extra:
            parts.append(f"unknown field(s) {', '.join(map(str, extra))}")
        raise RecordError(f"a {what} record of dtype {describe_dtype(dtype)}: {'; '.join(parts)}")
    return tuple(value[name] for name in names)


def coerce_batch(values: Any, dtype: np.dtype[Any], what: str = "request") -> npt.NDArray[Any]:
    """Turn a batch into a 1-D array of ``dtype``, or raise :class:`RecordError`.

    Accepted: a 1-D NumPy array of exactly ``dtype`` (used as is, no copy), or a
    sequence of records each accepted by :func:`coerce_record`. Every record is
    validated before this returns, so a bad record anywhere means nothing is sent.
    """
    if isinstance(values, np.ndarray):
        if values.dtype != dtype:
            raise _dtype_mismatch(values.dtype, dtype, what)
        if values.ndim != 1:
            raise RecordError(
                f"a batch of {what} records must be a 1-D array, got shape {values.shape}"
            )
        return values
    if isinstance(values, bytes | bytearray | memoryview | str) or not isinstance(values, Sequence):
        raise RecordError(
            f"a batch of {what} records must be a 1-D array of dtype {describe_dtype(dtype)} "
            f"or a sequence of records, not {type(values).__name__}"
        )
    out = np.empty(len(values), dtype=dtype)
    for index, value in enumerate(values):
        try:
            out[index] = coerce_record(value, dtype, what)[0]
        except RecordError as exc:
            raise RecordError(f"record {index} of the batch: {exc}") from None
    return out


def copy_records(destination: npt.NDArray[Any], source: npt.NDArray[Any]) -> None:
    """``destination[...] = source`` for two 1-D record arrays of one dtype and length.

    Large contiguous runs are copied as bytes, in one ``memcpy``: NumPy copies a
    structured array field by field, about 25x slower for the ring's small records (a
    16-byte record: 64 us against 2.6 us per 16,384 records on a 2-core VM). Short
    runs, where making the byte views costs more than the copy, are assigned -- except
    records with padding: a field-by-field copy leaves the destination's padding as it
    was (``np.empty``'s leftovers: heap bytes of this process), so they are always
    copied as bytes, carrying the source's padding (zero in ring slots: the device
    sides zero it, ``docs/ring-protocol.md`` section 7).
    """
    if destination.dtype != source.dtype or len(destination) != len(source):
        raise ValueError(
            f"cannot copy {source.shape} records of {source.dtype} into "
            f"{destination.shape} of {destination.dtype}"
        )
    if (
        (len(source) >= _BYTE_COPY_MIN or _padded(source.dtype))
        and destination.flags.c_contiguous
        and source.flags.c_contiguous
    ):
        destination.view(np.uint8)[...] = source.view(np.uint8)
    else:
        destination[...] = source


#: Records from which :func:`copy_records` copies bytes (below, assignment is cheaper).
_BYTE_COPY_MIN: Final = 128


@functools.cache
def _padded(dtype: np.dtype[Any]) -> bool:
    """Whether some byte of a ``dtype`` record belongs to no field (nested included)."""

    def covered(dtype: np.dtype[Any]) -> int:
        if dtype.subdtype is not None:
            inner, shape = dtype.subdtype
            return covered(inner) * int(np.prod(shape, dtype=np.int64))
        if dtype.fields is None:
            return dtype.itemsize
        return sum(covered(field[0]) for field in dtype.fields.values())

    return covered(dtype) < dtype.itemsize


def records_copy(source: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A new array holding a copy of the 1-D record array ``source`` (as fast as
    :func:`copy_records`; padding copied as :func:`copy_records` says)."""
    if len(source) < _BYTE_COPY_MIN and not _padded(source.dtype):
        return source.copy()
    copy = np.empty(len(source), source.dtype)
    copy_records(copy, source)
    return copy
