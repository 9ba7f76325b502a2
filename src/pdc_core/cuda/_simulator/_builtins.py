"""Lane-aware replacements of ``math``, NumPy's scalar types and a few builtins.

A body rebound for the vectorised strategy sees these instead of the originals: ``math``
functions over per-thread values (computed in double precision, NaN or inf where Python
raises), ``round``, ``range`` over per-thread bounds, ``min``/``max``, ``int``/``float``,
``isinstance``/``type``, and a ``print`` that defers each lane's line until the run stands
(through the protocol ``_PrintingRun``). On plain values each gives the original's
result.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

import numpy as np

from ._limits import _Diverge, _Unsupported
from ._memory import _LaneArray, _LaneShared
from ._state import _LaneState, _state
from ._values import Lanes, _Caster, _operand, _uniform

# --------------------------------------------------------------------------------------
# lane-aware replacements of math, numpy scalar types and a few builtins


_SCALAR_TYPE_NAMES: Final = (
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "intp",
    "uintp",
    "float16",
    "float32",
    "float64",
    "double",
    "single",
    "complex64",
    "complex128",
)
_CASTERS: Final[dict[type, _Caster]] = {
    getattr(np, name): _Caster(getattr(np, name)) for name in _SCALAR_TYPE_NAMES
}


class _LaneNumpy:
    """``numpy`` as a vectorised body sees it: scalar types also convert per-thread values."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(np, name)
        if isinstance(value, type) and value in _CASTERS:
            return _CASTERS[value]
        return value


def _math_function(name: str, ufunc: Any, to_int: bool = False, arity: int = 1) -> Any:
    """``math.<name>`` as kernel bodies see it in both strategies: as on a GPU, where
    math never raises, a domain or range error gives NaN or inf (numba's results)
    instead of ``ValueError``/``OverflowError``."""
    original = getattr(math, name)

    def function(*args: Any) -> Any:
        if not any(isinstance(arg, Lanes) for arg in args):
            try:
                return original(*args)
            except (ValueError, OverflowError):
                if to_int or len(args) != arity or any(isinstance(a, complex) for a in args):
                    raise  # no float result to give (floor(inf) has no int)
                with np.errstate(all="ignore"):
                    return float(ufunc(*(np.float64(arg) for arg in args)))
        if len(args) != arity:
            raise _Unsupported(f"math.{name} with {len(args)} arguments")
        operands = []
        for arg in args:
            value = _operand(arg)
            array = np.asarray(value)
            if array.dtype.kind == "c":
                raise TypeError(f"math.{name} does not accept complex numbers")
            operands.append(array.astype(np.float64))
        with np.errstate(all="ignore"):  # NaN or inf where Python's math would raise
            result = ufunc(*operands)
        if to_int:
            return Lanes(result.astype(np.int64))
        return Lanes(result)

    function.__name__ = name
    return function


_MATH_FUNCTIONS: Final[dict[str, Any]] = {
    name: _math_function(name, ufunc, to_int, arity)
    for name, ufunc, to_int, arity in (
        ("sqrt", np.sqrt, False, 1),
        ("exp", np.exp, False, 1),
        ("exp2", np.exp2, False, 1),
        ("expm1", np.expm1, False, 1),
        ("log", np.log, False, 1),
        ("log2", np.log2, False, 1),
        ("log10", np.log10, False, 1),
        ("log1p", np.log1p, False, 1),
        ("sin", np.sin, False, 1),
        ("cos", np.cos, False, 1),
        ("tan", np.tan, False, 1),
        ("asin", np.arcsin, False, 1),
        ("acos", np.arccos, False, 1),
        ("atan", np.arctan, False, 1),
        ("atan2", np.arctan2, False, 2),
        ("sinh", np.sinh, False, 1),
        ("cosh", np.cosh, False, 1),
        ("tanh", np.tanh, False, 1),
        ("asinh", np.arcsinh, False, 1),
        ("acosh", np.arccosh, False, 1),
        ("atanh", np.arctanh, False, 1),
        ("fabs", np.fabs, False, 1),
        ("floor", np.floor, True, 1),
        ("ceil", np.ceil, True, 1),
        ("trunc", np.trunc, True, 1),
        ("copysign", np.copysign, False, 2),
        ("hypot", np.hypot, False, 2),
        ("pow", np.power, False, 2),
        ("fmod", np.fmod, False, 2),
        ("degrees", np.degrees, False, 1),
        ("radians", np.radians, False, 1),
        ("isnan", np.isnan, False, 1),
        ("isinf", np.isinf, False, 1),
        ("isfinite", np.isfinite, False, 1),
    )
    if hasattr(math, name)
}
_MATH_BY_IDENTITY: Final[dict[int, Any]] = {
    id(getattr(math, name)): function for name, function in _MATH_FUNCTIONS.items()
}


def _kernel_round(number: Any, ndigits: Any = None) -> Any:
    """``round`` as kernel bodies see it: where scaling a float by ``10**ndigits``
    overflows, the value itself (numba's result; NumPy's round gives inf or NaN)."""
    if ndigits is None:
        return builtins.round(number)
    values = number.v if isinstance(number, Lanes) else number
    if not isinstance(values, np.floating | np.ndarray) or values.dtype.kind != "f":
        return builtins.round(number, ndigits)
    digits = operator.index(ndigits) if not isinstance(ndigits, Lanes) else ndigits.v
    with np.errstate(all="ignore"):
        rounded = np.round(values, digits) if not isinstance(digits, np.ndarray) else None
        if rounded is None:
            raise _Unsupported("round() to a per-thread number of digits")
        kept = np.where(np.isfinite(values) & ~np.isfinite(rounded), values, rounded)
    if isinstance(number, Lanes):
        return Lanes(kept.astype(values.dtype, copy=False))
    return values.dtype.type(kept)


class _LaneMath:
    """``math`` as kernel bodies see it: functions of per-thread values vectorise, and
    domain errors give NaN or inf as on a GPU (both strategies)."""

    def __getattr__(self, name: str) -> Any:
        function = _MATH_FUNCTIONS.get(name)
        return function if function is not None else getattr(math, name)


class _LaneRange:
    __slots__ = ("count", "start", "step")

    def __init__(self, start: Any, step: Any, count: int) -> None:
        self.start, self.step, self.count = start, step, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Any]:
        for k in range(self.count):
            value = self.start + k * self.step
            yield Lanes(value) if isinstance(value, np.ndarray) else value


def _range_operand(value: Any) -> Any:
    if isinstance(value, Lanes):
        if value.v.dtype.kind not in "iu":
            raise TypeError(f"{value.v.dtype} values cannot be range bounds")
        return value.v.astype(np.int64)
    return operator.index(value)


def _lane_range(*args: Any) -> Any:
    if not any(isinstance(arg, Lanes) for arg in args):
        return range(*args)
    if not 1 <= len(args) <= 3:
        raise TypeError(f"range expected 1 to 3 arguments, got {len(args)}")
    bounds = [_range_operand(arg) for arg in args]
    start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
    if np.any(np.asarray(step) == 0):
        raise ValueError("range() arg 3 must not be zero")
    positive = np.asarray(step) > 0
    span = np.where(positive, stop - start, start - stop)
    size = np.abs(step)
    count = np.maximum(0, (span + size - 1) // size)
    count = np.broadcast_to(count, np.broadcast(start, stop, step, count).shape)
    if count.ndim and not _uniform(np.ascontiguousarray(count)):
        raise _Diverge(np.ascontiguousarray(count))
    return _LaneRange(start, step, int(count.reshape(-1)[0]))


def _pick(name: str, better: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    original = getattr(builtins, name)

    def pick(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 2 or kwargs or not any(isinstance(arg, Lanes) for arg in args):
            return original(*args, **kwargs)
        result = args[0]
        for candidate in args[1:]:
            chosen = better(candidate, result)
            if isinstance(chosen, Lanes):
                result = Lanes(np.where(chosen.v, _operand(candidate), _operand(result)))
            elif chosen:
                result = candidate
        return result

    pick.__name__ = name
    return pick


def _select(condition: Any, taken: Any, kept: Any) -> Any:
    """``taken`` where the per-thread ``condition`` holds, else ``kept`` (if-conversion)."""
    values = condition.v
    truth = values if values.dtype.kind == "b" else values != 0
    return Lanes(np.where(truth, _operand(taken), _operand(kept)))


def _is_lanes(value: Any) -> bool:
    return isinstance(value, Lanes)


def _lane_int(value: Any = 0, *args: Any) -> Any:
    if isinstance(value, Lanes) and not args:
        if value.v.dtype.kind == "c":
            raise TypeError("int() cannot convert complex values")
        return Lanes(
            np.trunc(value.v).astype(np.int64)
            if value.v.dtype.kind == "f"
            else value.v.astype(np.int64)
        )
    return int(value, *args)


def _lane_float(value: Any = 0.0) -> Any:
    if isinstance(value, Lanes):
        if value.v.dtype.kind == "c":
            raise TypeError("float() cannot convert complex values")
        return Lanes(value.v.astype(np.float64))
    return float(value)


def _lane_isinstance(value: Any, kinds: Any) -> bool:
    if isinstance(value, Lanes | _LaneArray | _LaneShared):
        raise _Unsupported("isinstance() of a per-thread value or a wrapped array")
    return isinstance(value, kinds)


def _lane_type(*args: Any) -> Any:
    if len(args) == 1 and isinstance(args[0], Lanes | _LaneArray | _LaneShared):
        raise _Unsupported("type() of a per-thread value or a wrapped array")
    return type(*args)


class _PrintingRun(Protocol):
    """A chunk run, as ``print`` in the vectorised strategy sees it (``_engine._PrintingRun``
    satisfies it): the lines to print once the run is known to stand."""

    @property
    def prints(self) -> list[tuple[Any, str]]: ...


def _lane_print_for(run: _PrintingRun) -> Callable[..., None]:
    def lane_print(
        *args: Any,
        sep: str | None = " ",
        end: str | None = "\n",
        file: Any = None,
        flush: bool = False,
    ) -> None:
        state = _state()
        if not isinstance(state, _LaneState):
            builtins.print(*args, sep=sep, end=end, file=file, flush=flush)
            return
        if state.replaying():
            state.replayed()  # the parent run printed it
            return
        state.record("none")
        sep = " " if sep is None else sep
        end = "\n" if end is None else end
        for lane in range(state.n):
            text = sep.join(str(a.v[lane] if isinstance(a, Lanes) else a) for a in args)
            run.prints.append((file, text + end))

    return lane_print
