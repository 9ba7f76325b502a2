"""Per-thread values of the vectorised strategy: :class:`Lanes` and its conversions.

A :class:`Lanes` holds one value per thread in a NumPy array; every operation on it is
elementwise over the threads, and anything that would need one Python value for all of
them (``bool``, ``int``, an index that is not per-thread) raises ``_Diverge`` or
``_Unsupported`` (from :mod:`._limits`), which the engine turns into a split or a
per-thread run. ``_Caster`` (``float32(x)`` on a per-thread value) and the dtype and
shape checks of ``cuda.shared.array``/``local.array`` live here too. Imports only
:mod:`._limits`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from numpy.lib.mixins import NDArrayOperatorsMixin

from ._limits import _Diverge, _Unsupported

# --------------------------------------------------------------------------------------
# per-thread values of the vectorised strategy

_SCALARS = (int, float, complex, bool, np.generic)


def _operand(value: Any) -> Any:
    if isinstance(value, Lanes):
        return value.v
    if isinstance(value, _SCALARS):
        return value
    raise _Unsupported(f"an operation mixes per-thread values with {type(value).__name__}")


def _uniform(values: npt.NDArray[Any]) -> bool:
    """True when every lane holds the same bits (so NaNs are equal, 0.0 and -0.0 not)."""
    if values.shape[0] == 1:
        return True
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(values.shape[0], -1)
    return bool((raw == raw[0]).all())


class Lanes(NDArrayOperatorsMixin):
    """One value per simulated thread (lane), in the vectorised strategy.

    Arithmetic, comparisons and NumPy ufuncs apply lane by lane and give ``Lanes``.
    Turning it into one Python value (``if``, ``while``, ``int()``, ``range()``,
    indexing a plain Python object) works when every lane agrees, and otherwise makes
    the simulator re-run the body once per group of agreeing lanes. Kernel code never
    needs to know about this class; it exists so that ``cuda.grid(1)`` can stand for
    many threads at once.
    """

    __slots__ = ("v",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, values: npt.NDArray[Any]) -> None:
        self.v = values

    def __repr__(self) -> str:
        return f"Lanes({self.v!r})"

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__" or "out" in kwargs or "where" in kwargs:
            raise _Unsupported(f"numpy.{ufunc.__name__}.{method} of per-thread values")
        result = ufunc(*(_operand(x) for x in inputs), **kwargs)
        if isinstance(result, tuple):
            return tuple(Lanes(r) for r in result)
        return Lanes(result)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if func not in _ELEMENTWISE_FUNCTIONS:
            raise _Unsupported(f"numpy.{getattr(func, '__name__', func)} of per-thread values")
        result = func(*(_operand(a) for a in args), **{k: _operand(v) for k, v in kwargs.items()})
        if isinstance(result, np.ndarray) and result.ndim == 1:
            return Lanes(result)
        raise _Unsupported(f"numpy.{func.__name__} did not give one value per thread")

    # -- in-place operators make new values (``i += 1`` must not change a cached index) --

    def _rebind_instead(self, other: Any) -> Any:
        return NotImplemented

    __iadd__ = __isub__ = __imul__ = __imatmul__ = __itruediv__ = __ifloordiv__ = _rebind_instead
    __imod__ = __ipow__ = __ilshift__ = __irshift__ = __iand__ = __ixor__ = _rebind_instead
    __ior__ = _rebind_instead

    # -- conversions to a single Python value --------------------------------------------

    def _single(self) -> Any:
        if _uniform(self.v):
            return self.v[0]
        raise _Diverge(self.v)

    def __bool__(self) -> bool:
        values = self.v
        if values.dtype.kind not in "biufc":
            raise _Unsupported(f"truth value of per-thread {values.dtype} values")
        truth = values if values.dtype.kind == "b" else values != 0
        if truth.all():
            return True
        if not truth.any():
            return False
        raise _Diverge(truth)

    def __index__(self) -> int:
        if self.v.dtype.kind not in "iu":
            raise TypeError(f"{self.v.dtype} values cannot be used as an index")
        return operator.index(self._single())

    def __int__(self) -> int:
        return int(self._single())

    def __float__(self) -> float:
        return float(self._single())

    def __complex__(self) -> complex:
        return complex(self._single())

    def item(self) -> Any:
        """The value as a Python scalar, as ``ndarray.item()`` gives it; when the lanes
        disagree, the simulator re-runs the body once per group of agreeing lanes."""
        return self._single().item()

    def __str__(self) -> str:
        return str(self._single())

    def __format__(self, spec: str) -> str:
        return format(self._single(), spec)

    def __round__(self, ndigits: int | None = None) -> Lanes:
        if ndigits is None:
            if self.v.dtype.kind in "fc":
                return Lanes(np.rint(self.v).astype(np.int64))
            return Lanes(self.v.astype(np.int64))
        return Lanes(np.round(self.v, ndigits))

    def __floor__(self) -> Lanes:
        return Lanes(np.floor(self.v).astype(np.int64))

    def __ceil__(self) -> Lanes:
        return Lanes(np.ceil(self.v).astype(np.int64))

    def __trunc__(self) -> Lanes:
        return Lanes(np.trunc(self.v).astype(np.int64))

    # -- a scalar has no length, items or reductions -------------------------------------

    def __len__(self) -> int:
        raise TypeError("a per-thread scalar has no len()")

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("a per-thread scalar is not iterable")

    def __getitem__(self, index: Any) -> Any:
        raise TypeError("a per-thread scalar cannot be indexed")

    # -- the few ndarray attributes a scalar also has ------------------------------------

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy dtype of the lanes' values."""
        return self.v.dtype

    @property
    def real(self) -> Lanes:
        """The real part of every lane."""
        return Lanes(self.v.real)

    @property
    def imag(self) -> Lanes:
        """The imaginary part of every lane."""
        return Lanes(self.v.imag)

    def conjugate(self) -> Lanes:
        """The complex conjugate of every lane (``conj`` is the same)."""
        return Lanes(self.v.conjugate())

    conj = conjugate

    def astype(self, dtype: Any) -> Lanes:
        """Every lane converted to ``dtype`` (a NumPy dtype or a numba type)."""
        return Lanes(self.v.astype(_as_dtype(dtype)))


_ELEMENTWISE_FUNCTIONS: Final = frozenset(
    {np.where, np.clip, np.round, np.around, np.isclose, np.nan_to_num, np.real, np.imag}
)


def _as_dtype(dtype: Any) -> np.dtype[Any]:
    """A NumPy dtype from anything that names one, numba types (``float32``) included."""
    if isinstance(dtype, _Caster):
        return dtype.dtype
    if type(dtype).__module__.startswith("numba"):
        # numba's own conversion knows its records (numba.np.numpy_support.from_dtype)
        # and scalar types; numba is imported already when one of its types is given
        from numba.np import numpy_support

        try:
            converted: np.dtype[Any] = numpy_support.as_dtype(dtype)
        except Exception:  # numba's NumbaNotImplementedError: no dtype for this type
            pass
        else:
            return converted
    try:
        result: np.dtype[Any] = np.dtype(dtype)
    except (TypeError, ValueError):
        pass
    else:
        return result
    raise TypeError(f"{dtype!r} is not a dtype (give a NumPy dtype such as np.float32)")


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, bool):
        raise TypeError(f"{what} shape must be an int or a tuple of ints, not {shape!r}")
    if isinstance(shape, int | np.integer):
        items: tuple[Any, ...] = (shape,)
    elif isinstance(shape, tuple | list):
        items = tuple(shape)
    else:
        raise TypeError(f"{what} shape must be an int or a tuple of ints, not {shape!r}")
    result = []
    for item in items:
        try:
            extent = operator.index(item)
        except TypeError:
            raise TypeError(f"{what} shape {shape!r} contains {item!r}, not an int") from None
        if extent < 0:
            raise ValueError(f"{what} shape {shape!r} has a negative dimension")
        result.append(extent)
    return tuple(result)


class _Caster:
    """A NumPy scalar type that also converts per-thread values (``float32(x)``)."""

    __slots__ = ("dtype", "type")

    def __init__(self, scalar_type: type[np.generic]) -> None:
        self.type = scalar_type
        self.dtype: np.dtype[Any] = np.dtype(scalar_type)

    def __call__(self, value: Any = 0) -> Any:
        if isinstance(value, Lanes):
            return Lanes(value.v.astype(self.dtype))
        return self.type(value)

    def __repr__(self) -> str:
        return f"<per-thread {self.dtype} conversion>"
