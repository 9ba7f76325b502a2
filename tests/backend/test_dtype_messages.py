"""Errors about records print their dtypes as short field lists, not NumPy's raw dict."""

from __future__ import annotations

import numpy as np
import pytest

from pdc_core import PersistentKernel, PersistentPipeline, RecordError
from pdc_core.backend import coerce_batch, coerce_record

REQ = np.dtype([("id", "<u8"), ("x", "<f8"), ("v", "<f4", (3,))], align=True)
FIELDS = "[id: u8, x: f8, v: f4[3]]"


def test_record_errors_print_a_short_field_list() -> None:
    with pytest.raises(RecordError) as caught:
        coerce_record({"id": 1}, REQ)
    assert str(caught.value) == f"a request record of dtype {FIELDS}: missing field(s) x, v"
    with pytest.raises(RecordError) as caught:
        coerce_record(np.zeros(1, np.dtype([("id", "<u8")])), REQ)
    assert str(caught.value) == (
        f"a request record has dtype [id: u8], but the ring's record dtype is {FIELDS}"
    )
    with pytest.raises(
        RecordError, match=r"^record 1 of the batch: .*of dtype \[id: u8, "
    ) as batch:
        coerce_batch([(1, 1.0, (0, 0, 0)), 2.5], REQ)
    assert "'names'" not in str(batch.value)
    assert "itemsize" not in str(batch.value)


def test_nested_and_big_endian_fields_stay_readable() -> None:
    inner = np.dtype([("a", ">i4"), ("b", "u1")])
    outer = np.dtype([("head", inner), ("tail", "<f2")])
    with pytest.raises(RecordError, match=r"\[head: \[a: >i4, b: u1\], tail: f2\]"):
        coerce_record(1.0, outer)


def test_same_fields_laid_out_differently_show_their_layouts() -> None:
    aligned = np.dtype([("id", "<u8"), ("x", "<f4")], align=True)
    packed = np.dtype([("id", "<u8"), ("x", "<f4")])
    with pytest.raises(RecordError) as caught:
        coerce_record(np.zeros(1, packed), aligned)
    assert str(caught.value) == (
        "a request record has dtype [id: u8, x: f4] (12 bytes, offsets [0, 8]), but the "
        "ring's record dtype is [id: u8, x: f4] (16 bytes, offsets [0, 8])"
    )


def test_a_pipeline_link_mismatch_names_both_field_lists() -> None:
    first = PersistentKernel("first", REQ, np.dtype([("y", "<f8")]))
    second = PersistentKernel("second", REQ, REQ)
    with pytest.raises(TypeError, match=r"replies are \[y: f8\], .*requests are \[id: u8, x: f8"):
        PersistentPipeline(first, second)
