"""Record layouts and record conversion at their edges (issue 35, items 3, 14 and 15):
a dtype of no size is a RecordError, a forgotten (None) dtype a TypeError, and text is
never parsed into a numeric field, at every way into a ring (a session's request and
request_batch, and coerce_record/coerce_batch for extenders)."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import PersistentKernel, RecordError, open_persistent_kernel, persistent_kernel
from pdc_core.backend import RingLayout, coerce_batch, coerce_record

REQ = np.dtype([("id", "<i8"), ("x", "<f8")])
LIMIT = 10
ZERO_SIZE = [np.dtype([]), "V0", "S0", "U0", np.dtype("V0"), [("a", "S0")]]


def _same(requests: Any) -> Any:
    return requests.copy()


@pytest.mark.parametrize("dtype", ZERO_SIZE, ids=str)
@pytest.mark.parametrize("side", ["request", "reply"])
def test_a_dtype_of_no_size_is_a_record_error(dtype: Any, side: str) -> None:
    dtypes = {"request_dtype": REQ, "reply_dtype": REQ, f"{side}_dtype": dtype}
    with pytest.raises(RecordError, match=f"the {side} dtype .* has no size"):
        persistent_kernel(**dtypes)(_same)
    with pytest.raises(RecordError, match=f"the {side} dtype .* has no size"):
        PersistentKernel("k", dtypes["request_dtype"], dtypes["reply_dtype"])
    with pytest.raises(RecordError, match=f"the {side} dtype .* has no size"):
        RingLayout(dtypes["request_dtype"], dtypes["reply_dtype"], 4)


@pytest.mark.parametrize("side", ["request", "reply"])
def test_a_none_dtype_is_a_type_error_not_a_float_slot(side: str) -> None:
    dtypes = {"request_dtype": REQ, "reply_dtype": REQ, f"{side}_dtype": None}
    with pytest.raises(TypeError, match=f"the {side} dtype is None"):
        persistent_kernel(**dtypes)(_same)
    with pytest.raises(TypeError, match=f"the {side} dtype is None"):
        PersistentKernel("k", dtypes["request_dtype"], dtypes["reply_dtype"])


TEXT = [
    ((1, "2.0"), REQ, "field 'x'"),
    ((1, b"2"), REQ, "field 'x'"),
    (("1", 2.0), REQ, "field 'id'"),
    ((1, np.str_("2")), REQ, "field 'x'"),
    ({"id": 1, "x": "2.5"}, REQ, "field 'x'"),
    ([1, "2"], REQ, "field 'x'"),
    ("2.0", np.dtype("<f8"), "a request record of dtype"),
    ("7", np.dtype("<i4"), "a request record of dtype"),
    ("1", np.dtype([("v", "<f4")]), "field 'v'"),
    ((1, ["1", 2]), np.dtype([("a", "<i4"), ("b", "<f4", (2,))]), "field 'b'"),
    ((1, ("2", 3.0)), np.dtype([("a", "<i4"), ("in", [("p", "<u2"), ("q", "<f8")])]), "'p'"),
    ("1+2j", np.dtype("<c16"), "a request record of dtype"),
    ("True", np.dtype("?"), "a request record of dtype"),
]


@pytest.mark.parametrize(("value", "dtype", "where"), TEXT, ids=lambda v: repr(v)[:20])
def test_text_is_never_parsed_into_a_numeric_field(value: Any, dtype: Any, where: str) -> None:
    with pytest.raises(RecordError, match=f"{where}.*is text"):
        coerce_record(value, np.dtype(dtype))
    with pytest.raises(RecordError, match=f"record 1 of the batch: .*{where}.*is text"):
        coerce_batch([coerce_record(np.zeros((), dtype), np.dtype(dtype)), value], np.dtype(dtype))


def test_text_still_fills_text_fields_and_numbers_still_convert() -> None:
    mixed = np.dtype([("name", "S4"), ("label", "U3"), ("x", "<f8"), ("n", "<i2")])
    record = coerce_record((b"ab", "cd", 1, 2.0), mixed)
    assert record[0].tolist() == (b"ab", "cd", 1.0, 2)
    assert coerce_record({"name": "ab", "label": "c", "x": np.float32(0.5), "n": True}, mixed)[
        0
    ].tolist() == (b"ab", "c", 0.5, 1)


async def test_a_session_refuses_text_for_numbers_and_writes_nothing() -> None:
    kernel = PersistentKernel("text", REQ, REQ, capacity=4, bodies={"cpu": _same})
    with anyio.fail_after(LIMIT):
        async with open_persistent_kernel(kernel, "cpu") as session:
            with pytest.raises(RecordError, match=r"field 'x' \(float64\).*'2\.0' is text"):
                await session.request((1, "2.0"))
            with pytest.raises(RecordError, match=r"record 0 of the batch: field 'x'"):
                await session.request_batch([(1, "2.0"), (2, 3.0)])
            with pytest.raises(RecordError, match="is text"):
                await session.send({"id": 1, "x": "3"})
            assert session.statistics().sent == 0
            assert (await session.request((1, 2)))["x"] == 2.0  # an int is a number
