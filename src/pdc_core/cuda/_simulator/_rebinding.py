"""Rebinding a body's globals for a strategy, and the analysis of what a body calls.

``_analyse`` finds, once per body, the functions it reaches and whether it has barriers;
globals and closure values are frozen at the first launch (as numba's compile reads
them); :class:`_Rebinder` makes a copy of a body (and of the device functions it calls)
whose globals name pdc's ``cuda`` (``threads``/``lanes``) or numba's (``numba``), and, for
the vectorised strategy, the lane-aware built-ins, wrapped arrays and if-converted
branches. The chunk run is named only through the protocol ``_RebindingRun``.
"""

from __future__ import annotations

import contextlib
import dis
import math
import threading
import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import numpy as np

from .._ifconvert import LANES_TEST, SELECT, if_converted
from ._builtins import (
    _CASTERS,
    _MATH_BY_IDENTITY,
    _is_lanes,
    _kernel_round,
    _lane_float,
    _lane_int,
    _lane_isinstance,
    _lane_print_for,
    _lane_range,
    _lane_type,
    _LaneMath,
    _LaneNumpy,
    _pick,
    _PrintingRun,
    _select,
)
from ._limits import _BARRIER_NAMES
from ._memory import _LaneArray, _LoggedRun

# --------------------------------------------------------------------------------------
# rebinding a body's globals for each strategy

_OUR_MODULE = "pdc_core.cuda"

# The public vocabulary module, pdc_core.cuda, which hands itself over here when it is
# imported (see bind_vocabulary). This module never imports its package: importing it
# runs pdc_core.cuda first, which imports this module and then binds itself, so no body
# is ever rebound before the binding.
_vocabulary: types.ModuleType | None = None


def bind_vocabulary(module: types.ModuleType) -> None:
    """Make ``module`` the one that bodies' ``cuda`` (pdc's or numba's) is rebound to."""
    global _vocabulary
    _vocabulary = module


def _our_cuda() -> types.ModuleType:
    if _vocabulary is None:  # pragma: no cover - pdc_core.cuda binds itself on import
        raise RuntimeError(f"{_OUR_MODULE} has not finished importing")
    return _vocabulary


def _is_numba_cuda(value: Any) -> bool:
    if not isinstance(value, types.ModuleType):
        return False
    name = value.__name__
    return name == "numba.cuda" or name.endswith(".numba.cuda")


def _numba_scalar_type(value: Any) -> type[np.generic] | None:
    module = type(value).__module__
    if (
        not module.startswith("numba")
        or isinstance(value, types.ModuleType | type)
        or callable(getattr(value, "py_func", None))
    ):
        return None
    try:
        dtype = np.dtype(str(value))
    except (TypeError, ValueError):  # a record, an array type: not a scalar type
        return None
    return dtype.type if dtype.kind in "biufc" else None


def _is_device_function(value: Any, module: str) -> bool:
    return isinstance(value, types.FunctionType) and (
        value.__module__ == module or getattr(value, "__pdc_device__", False)
    )


def _is_numba_object(value: Any) -> bool:
    return type(value).__module__.startswith("numba")


def _python_function(value: Any) -> types.FunctionType | None:
    """The Python function behind a numba dispatcher or a pdc kernel, if any."""
    inner = getattr(value, "py_func", None)
    return inner if isinstance(inner, types.FunctionType) else None


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


_NAMES_CACHE: weakref.WeakKeyDictionary[types.FunctionType, frozenset[str]] = (
    weakref.WeakKeyDictionary()
)


def _names(function: types.FunctionType) -> frozenset[str]:
    cached = _NAMES_CACHE.get(function)
    if cached is None:
        cached = frozenset(
            name for code in _code_objects(function.__code__) for name in code.co_names
        )
        _NAMES_CACHE[function] = cached
    return cached


@dataclass(frozen=True)
class _Analysis:
    barrier: bool
    lanes_blocker: str | None


_ANALYSIS_CACHE: weakref.WeakKeyDictionary[types.FunctionType, _Analysis] = (
    weakref.WeakKeyDictionary()
)


def _reachable(function: types.FunctionType) -> list[types.FunctionType]:
    """The body and every Python function it reaches by a global name or a closure."""
    seen: dict[int, types.FunctionType] = {}
    stack = [function]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen[id(current)] = current
        candidates: list[Any] = [
            current.__globals__[name] for name in _names(current) if name in current.__globals__
        ]
        for cell in current.__closure__ or ():
            with contextlib.suppress(ValueError):  # an empty cell
                candidates.append(cell.cell_contents)
        for value in candidates:
            inner = value if isinstance(value, types.FunctionType) else _python_function(value)
            if inner is not None and id(inner) not in seen:
                stack.append(inner)
    return list(seen.values())


def _analyse(function: types.FunctionType) -> _Analysis:
    cached = _ANALYSIS_CACHE.get(function)
    if cached is not None:
        return cached
    barrier = False
    blocker: str | None = None
    for reached in _reachable(function):
        for code in _code_objects(reached.__code__):
            if _BARRIER_NAMES & set(code.co_names):
                barrier = True
            if blocker is not None:
                continue
            freevars = set(code.co_freevars)
            for instruction in dis.get_instructions(code):
                opname = instruction.opname
                if opname == "PUSH_EXC_INFO":
                    blocker = f"{reached.__qualname__} handles exceptions (try/except/with)"
                elif opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                    blocker = f"{reached.__qualname__} assigns the global {instruction.argval}"
                elif opname == "STORE_DEREF" and instruction.argval in freevars:
                    blocker = f"{reached.__qualname__} assigns the nonlocal {instruction.argval}"
                if blocker is not None:
                    break
    result = _Analysis(barrier=barrier, lanes_blocker=blocker)
    _ANALYSIS_CACHE[function] = result
    return result


Target = Literal["threads", "lanes", "numba"]


class _RebindingRun(_LoggedRun, _PrintingRun, Protocol):
    """A chunk run, as the vectorised rebinding sees it (``_engine._RebindingRun`` satisfies
    it): the run its arrays log stores in and its ``print`` defers lines to."""


class _Rebinder:
    """Copies of a body and its device functions whose globals suit one strategy."""

    def __init__(self, target: Target, run: _RebindingRun | None = None, numba_cuda: Any = None):
        self.target = target
        self.run = run
        self.numba_cuda = numba_cuda
        self.memo: dict[int, Any] = {}
        self.ours = _our_cuda()
        self.lane_builtins: dict[str, Any] = {}
        if target == "threads":
            self.lane_builtins = {"round": _kernel_round}
        if target == "lanes":
            assert run is not None
            self.lane_builtins = {
                "range": _lane_range,
                "min": _pick("min", lambda candidate, best: candidate < best),
                "max": _pick("max", lambda candidate, best: candidate > best),
                "int": _lane_int,
                "float": _lane_float,
                "print": _lane_print_for(run),
                "isinstance": _lane_isinstance,
                "type": _lane_type,
                "round": _kernel_round,
            }

    def substitute(self, value: Any, module: str) -> Any:
        target = self.target
        if value is self.ours:
            return self.numba_cuda if target == "numba" else value
        if _is_numba_cuda(value):
            return value if target == "numba" else self.ours
        if isinstance(value, types.FunctionType):
            if _is_device_function(value, module):
                return self.rebind(value, device=True)
            return value
        inner = _python_function(value)
        if inner is not None and (target != "numba" or not _is_numba_object(value)):
            # a jitted function (numba's dispatcher or a pdc kernel) called from a body
            # is a device function there, as numba compiles a kernel called by a kernel
            return self.rebind(inner, device=True)
        scalar = _numba_scalar_type(value)
        if scalar is not None and target != "numba":
            return _CASTERS.get(scalar, scalar) if target == "lanes" else scalar
        if target != "numba":
            if value is math:
                return _LaneMath()
            if callable(value) and id(value) in _MATH_BY_IDENTITY:
                return _MATH_BY_IDENTITY[id(value)]
        if target == "lanes":
            if value is np:
                return _LaneNumpy()
            if isinstance(value, type) and value in _CASTERS:
                return _CASTERS[value]
            if isinstance(value, np.ndarray):
                assert self.run is not None
                return _LaneArray(value, self.run)
        return value

    def rebind(self, function: types.FunctionType, device: bool = False) -> Any:
        done = self.memo.get(id(function))
        if done is not None:
            return done
        module = function.__module__
        frozen_globals, frozen_cells = _frozen(function)
        new_globals = dict(function.__globals__)
        new_globals.update(frozen_globals)
        # empty cells (names the enclosing function assigns later) stay shared
        fresh = tuple(
            types.CellType() if frozen is not _EMPTY else cell
            for cell, frozen in zip(function.__closure__ or (), frozen_cells, strict=True)
        )
        cells = fresh
        code = function.__code__
        if self.target == "lanes":
            converted = if_converted(function)
            if converted is not None:
                # per-thread branches that only assign locals select lane by lane
                by_name = dict(zip(code.co_freevars, cells, strict=True))
                cells = tuple(by_name[name] for name in converted.co_freevars)
                code = converted
                new_globals[SELECT] = _select
                new_globals[LANES_TEST] = _is_lanes
        copy = types.FunctionType(
            code, new_globals, function.__name__, function.__defaults__, cells or None
        )
        copy.__kwdefaults__ = function.__kwdefaults__
        copy.__qualname__ = function.__qualname__
        result: Any = copy
        if self.target == "numba" and device:
            result = self.numba_cuda.jit(device=True)(copy)
        self.memo[id(function)] = result
        for name in _names(function):
            if name in new_globals:
                new_globals[name] = self.substitute(new_globals[name], module)
            elif name in self.lane_builtins:
                new_globals[name] = self.lane_builtins[name]
        for old, new, frozen in zip(function.__closure__ or (), fresh, frozen_cells, strict=True):
            if new is not old:
                new.cell_contents = self.substitute(frozen, module)
        return result


def _constant(value: Any) -> Any:
    if type(value) is np.ndarray:
        frozen = value.copy()
        frozen.flags.writeable = False
        return frozen
    return value


#: A closure cell that was empty when its function was first launched.
_EMPTY: Final = object()

_FROZEN: weakref.WeakKeyDictionary[types.FunctionType, tuple[dict[str, Any], tuple[Any, ...]]] = (
    weakref.WeakKeyDictionary()
)
_FROZEN_LOCK = threading.Lock()


def _frozen(function: types.FunctionType) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The globals ``function`` names and its closure's values, as they were when a
    launch first reached it.

    numba reads a kernel's globals and closure variables when it compiles the kernel
    and never again (they are compile-time constants); pdc's first launch stands for
    that compilation, so rebinding the name later changes nothing. A NumPy array is
    copied then, read-only (numba copies a host array into the kernel as a constant);
    device arrays and other objects are kept by reference, as numba keeps a device
    array's pointer.
    """
    with _FROZEN_LOCK:
        snapshot = _FROZEN.get(function)
        if snapshot is None:
            values = function.__globals__
            cells = tuple(
                _constant(cell.cell_contents) if _cell_filled(cell) else _EMPTY
                for cell in function.__closure__ or ()
            )
            named = {name: _constant(values[name]) for name in _names(function) if name in values}
            snapshot = (named, cells)
            _FROZEN[function] = snapshot
    return snapshot


def _cell_filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - reading is the test
    except ValueError:
        return False
    return True
