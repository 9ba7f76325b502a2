"""C structs for ring records: NumPy record dtypes rendered as CUDA C.

A persistent kernel's request and reply slots are NumPy records; the device function
the user writes sees them as C structs with the same field names, types and byte
offsets. The size is checked at compile time (``static_assert``) and every field's
offset when the kernel starts (NVRTC has no constant ``offsetof``), so a layout
mismatch is an error, never silent corruption.

Only layouts a C compiler reproduces exactly are accepted: every field at an offset
that is a multiple of its alignment, and a size that is a multiple of the struct's
alignment. ``np.dtype([...], align=True)`` always qualifies; a packed dtype that does
not is refused with a message saying so.

A nested record field becomes a struct of its own named after its path
(``pdc_request_pos`` for field ``pos`` of ``pdc_request``); where two paths give one
name (field ``a`` holding ``b`` beside a field ``a_b``), the later one in field order
gets the first free ``_2``, ``_3``... suffix, so every generated name is distinct.

Every gap between fields, and the tail after the last, is a ``_pdc_pad*`` or
``_pdc_tail`` member; :attr:`CStruct.padding_zeroer` is a device function
``pdc_zero_padding(T&)`` (one overload per struct with padding, nested ones included)
that zeroes exactly those bytes. The ring kernel calls it on every reply after the
body ran, so no reply carries stale bytes out of the device (``docs/ring-protocol.md``
section 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CStruct", "c_struct"]

#: NumPy (kind, itemsize) -> (C type, alignment in bytes).
_SCALARS: dict[tuple[str, int], tuple[str, int]] = {
    ("b", 1): ("bool", 1),
    ("i", 1): ("signed char", 1),
    ("i", 2): ("short", 2),
    ("i", 4): ("int", 4),
    ("i", 8): ("long long", 8),
    ("u", 1): ("unsigned char", 1),
    ("u", 2): ("unsigned short", 2),
    ("u", 4): ("unsigned int", 4),
    ("u", 8): ("unsigned long long", 8),
    ("f", 2): ("unsigned short", 2),  # IEEE half, as raw bits (use __ushort_as_half)
    ("f", 4): ("float", 4),
    ("f", 8): ("double", 8),
    ("c", 8): ("pdc_complex64", 4),
    ("c", 16): ("pdc_complex128", 8),
    ("m", 8): ("long long", 8),
    ("M", 8): ("long long", 8),
}

_CPP_KEYWORDS = frozenset(
    [
        "alignas",
        "alignof",
        "and",
        "asm",
        "auto",
        "bool",
        "break",
        "case",
        "catch",
        "char",
        "char16_t",
        "char32_t",
        "class",
        "const",
        "constexpr",
        "const_cast",
        "continue",
        "decltype",
        "default",
        "delete",
        "do",
        "double",
        "dynamic_cast",
        "else",
        "enum",
        "explicit",
        "export",
        "extern",
        "false",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "mutable",
        "namespace",
        "new",
        "noexcept",
        "not",
        "nullptr",
        "operator",
        "or",
        "private",
        "protected",
        "public",
        "register",
        "reinterpret_cast",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "static_assert",
        "static_cast",
        "struct",
        "switch",
        "template",
        "this",
        "thread_local",
        "throw",
        "true",
        "try",
        "typedef",
        "typeid",
        "typename",
        "union",
        "unsigned",
        "using",
        "virtual",
        "void",
        "volatile",
        "wchar_t",
        "while",
    ]
)

PRELUDE = """\
struct pdc_complex64 { float real; float imag; };
struct pdc_complex128 { double real; double imag; };
"""


@dataclass
class CStruct:
    """A rendered struct: ``definitions`` (nested structs first) and its ``name``."""

    name: str
    size: int
    alignment: int
    definitions: list[str] = field(default_factory=list)
    #: ``(field, byte offset)`` of the top-level fields, checked on the device.
    offsets: list[tuple[str, int]] = field(default_factory=list)
    #: Whether some byte of the record is padding (here or in a nested struct).
    has_padding: bool = False
    #: The ``pdc_zero_padding`` overloads of this struct and its nested ones, nested
    #: first (set on the struct :func:`c_struct` returns); one per struct with padding.
    zeroers: list[str] = field(default_factory=list)

    @property
    def padding_zeroer(self) -> str:
        """Device code defining ``pdc_zero_padding(<name>&)``: zeroes every padding
        byte of a record (a no-op function where it has none)."""
        if not self.has_padding:
            return f"__device__ __forceinline__ void pdc_zero_padding({self.name}&) {{}}"
        return "\n".join(self.zeroers)

    @property
    def source(self) -> str:
        return "\n".join(self.definitions)

    def layout_check(self, function: str) -> str:
        """A device function returning 0, or 1 + the index of the first misplaced field.

        NVRTC has no constant ``offsetof``, so offsets are checked when the kernel
        starts (sizes are checked at compile time by ``static_assert``).
        """
        lines = [
            f"__device__ unsigned int {function}() {{",
            f"    const {self.name}* probe = reinterpret_cast<const {self.name}*>(0x1000);",
            "    const char* base = reinterpret_cast<const char*>(probe);",
        ]
        for index, (field_name, offset) in enumerate(self.offsets):
            lines.append(
                f"    if (reinterpret_cast<const char*>(&probe->{field_name}) - base != {offset})"
                f" return {index + 1};"
            )
        lines += ["    return 0;", "}"]
        return "\n".join(lines)


def _check_identifier(name: str, where: str) -> None:
    if not name.isidentifier() or not name.isascii():
        raise TypeError(f"field {name!r} of {where} is not a C identifier")
    if name in _CPP_KEYWORDS:
        raise TypeError(f"field {name!r} of {where} is a C++ keyword; rename it")
    if name.startswith("_pdc"):
        raise TypeError(f"field {name!r} of {where}: names starting with _pdc are reserved")


def _scalar(dtype: np.dtype[Any], where: str) -> tuple[str, int]:
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and np.little_endian is False):
        raise TypeError(f"{where} has big-endian dtype {dtype}; a CUDA device is little-endian")
    key = (dtype.kind, dtype.itemsize)
    if key in _SCALARS:
        return _SCALARS[key]
    if dtype.kind in "SV":
        return "unsigned char" if dtype.kind == "V" else "char", 1
    raise TypeError(f"{where} has dtype {dtype}, which has no CUDA C equivalent")


def c_struct(dtype: np.dtype[Any], name: str) -> CStruct:
    """Render ``dtype`` as a C struct called ``name`` (with nested structs as needed).

    A dtype without fields becomes a struct with one field, ``value``. Raises
    ``TypeError`` naming the field when the layout cannot be expressed in C.
    """
    dtype = np.dtype(dtype)
    if dtype.names is None:
        dtype = np.dtype(
            {"names": ["value"], "formats": [dtype], "offsets": [0], "itemsize": dtype.itemsize}
        )
    definitions: list[str] = []
    zeroers: list[str] = []
    struct = _render(dtype, name, definitions, zeroers, {name})
    struct.definitions = definitions
    struct.zeroers = zeroers
    return struct


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or with the first free ``_2``, ``_3``... suffix; recorded as taken."""
    candidate, suffix = name, 2
    while candidate in taken:
        candidate, suffix = f"{name}_{suffix}", suffix + 1
    taken.add(candidate)
    return candidate


def _render(
    dtype: np.dtype[Any],
    name: str,
    definitions: list[str],
    zeroers: list[str],
    taken: set[str],
) -> CStruct:
    where = f"record {name} ({dtype})"
    assert dtype.names is not None
    assert dtype.fields is not None
    members: list[tuple[int, str, int, int]] = []  # offset, declaration, size, alignment
    # Statements zeroing the padding of nested struct fields that have some.
    nested_zeroing: list[str] = []
    for field_name in dtype.names:
        _check_identifier(field_name, where)
        field_dtype, offset = dtype.fields[field_name][:2]
        shape: tuple[int, ...] = ()
        if field_dtype.subdtype is not None:
            field_dtype, shape = field_dtype.subdtype
        if field_dtype.names is not None:
            nested_name = _unique(f"{name}_{field_name}", taken)
            nested = _render(field_dtype, nested_name, definitions, zeroers, taken)
            ctype, align = nested.name, nested.alignment
            if nested.has_padding:
                count = int(np.prod(shape, dtype=np.int64)) if shape else 1
                nested_zeroing.append(
                    f"    for (unsigned int i = 0; i < {count}u; ++i) pdc_zero_padding("
                    f"reinterpret_cast<{ctype}*>(&record.{field_name})[i]);"
                )
        else:
            ctype, align = _scalar(field_dtype, f"field {field_name!r} of {where}")
            if field_dtype.kind in "SV":
                shape = (*shape, field_dtype.itemsize)
        if offset % align:
            raise TypeError(
                f"field {field_name!r} of {where} is at byte {offset}, not a multiple of its "
                f"{align}-byte alignment; build the dtype with np.dtype([...], align=True)"
            )
        dims = "".join(f"[{extent}]" for extent in shape)
        size = (
            field_dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            if shape
            else (field_dtype.itemsize)
        )
        if field_dtype.kind in "SV" and field_dtype.names is None:
            size = int(np.prod(shape, dtype=np.int64))
        members.append((offset, f"{ctype} {field_name}{dims};", size, align))
    members.sort(key=lambda member: member[0])
    alignment = max((member[3] for member in members), default=1)
    if dtype.itemsize % alignment:
        raise TypeError(
            f"{where} is {dtype.itemsize} bytes, not a multiple of its {alignment}-byte "
            "alignment; build the dtype with np.dtype([...], align=True)"
        )
    lines = [f"struct {name} {{"]
    pads: list[tuple[str, int]] = []  # member, bytes
    position = 0
    for pad_index, (offset, declaration, size, _align) in enumerate(members):
        if offset < position:
            raise TypeError(f"{where} has overlapping fields at byte {offset}")
        if offset > position:
            pads.append((f"_pdc_pad{pad_index}", offset - position))
            lines.append(f"    unsigned char _pdc_pad{pad_index}[{offset - position}];")
        lines.append(f"    {declaration}")
        position = offset + size
    if dtype.itemsize > position:
        pads.append(("_pdc_tail", dtype.itemsize - position))
        lines.append(f"    unsigned char _pdc_tail[{dtype.itemsize - position}];")
    lines.append("};")
    if pads or nested_zeroing:
        body = [
            f"    for (unsigned int i = 0; i < {size}u; ++i) record.{member}[i] = 0;"
            for member, size in pads
        ]
        zeroers.append(
            "\n".join(
                [
                    f"__device__ __forceinline__ void pdc_zero_padding({name}& record) {{",
                    *body,
                    *nested_zeroing,
                    "}",
                ]
            )
        )
    lines.append(
        f'static_assert(sizeof({name}) == {dtype.itemsize}, "pdc: {name} must be '
        f'{dtype.itemsize} bytes, as its NumPy dtype");'
    )
    definitions.append("\n".join(lines))
    checks = [(field_name, int(dtype.fields[field_name][1])) for field_name in dtype.names]
    return CStruct(
        name=name,
        size=dtype.itemsize,
        alignment=alignment,
        offsets=checks,
        has_padding=bool(pads or nested_zeroing),
    )
