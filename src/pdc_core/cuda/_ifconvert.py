"""If-conversion of kernel bodies for the simulator's vectorised strategy.

A branch whose threads disagree (``if x * x + y * y <= 1.0: inside += 1`` with a
different outcome per thread) splits a vectorised run into groups that never join
again, so a per-thread loop with such a branch multiplies its paths until the
simulator gives up vectorising. Where a branch only assigns local names from
expressions without side effects, :func:`if_converted` rewrites it so that a
per-thread condition *selects* each value lane by lane instead::

    if cond:                      _pdc_c = cond
        a = e1                    if _pdc_lanes(_pdc_c):
        b += e2          ->           a = _pdc_select(_pdc_c, e1, a)
    else:                             b = _pdc_select(_pdc_c, b + e2, b)
        a = e3                        a = _pdc_select(_pdc_c, a, e3)
                                  elif _pdc_c: (the original branches, unchanged)

Both sides are evaluated for every lane and the untaken value discarded: only
expressions that cannot store, print or call anything but pure functions qualify
(reading arrays may raise for an untaken lane's index, which makes the simulator
fall back to running those threads one by one: the result is unchanged). A uniform
condition takes the original branch. Bodies whose source is unavailable, or with
nothing to convert, are left as they are.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
import weakref
from typing import Any

__all__ = ["SELECT", "LANES_TEST", "if_converted"]

#: Names the converted code calls (bound in the body's globals by the simulator).
SELECT = "_pdc_select"
LANES_TEST = "_pdc_lanes"
_CONDITION = "_pdc_c"

#: Functions a converted branch may call (pure): builtins and the math/numpy modules.
_PURE_NAMES = frozenset({"abs", "min", "max", "int", "float", "round", "bool"})
_PURE_MODULES = frozenset({"math", "np", "numpy"})

# keyed by function: code objects compare equal by content, across files
_CACHE: weakref.WeakKeyDictionary[types.FunctionType, types.CodeType | None] = (
    weakref.WeakKeyDictionary()
)


def _pure(node: ast.expr) -> bool:
    for child in ast.walk(node):
        if isinstance(
            child,
            ast.Await
            | ast.Yield
            | ast.YieldFrom
            | ast.NamedExpr
            | ast.Lambda
            | ast.ListComp
            | ast.SetComp
            | ast.DictComp
            | ast.GeneratorExp,
        ):
            return False
        if isinstance(child, ast.Call):
            func = child.func
            if isinstance(func, ast.Name) and func.id in _PURE_NAMES:
                continue
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in _PURE_MODULES
            ):
                continue
            return False
    return True


def _assignments(body: list[ast.stmt]) -> list[tuple[str, ast.expr]] | None:
    """``(name, new value)`` of each statement, or None when one is not a plain
    assignment of a local name from a pure expression."""
    found: list[tuple[str, ast.expr]] = []
    for statement in body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and _pure(statement.value)
        ):
            found.append((statement.targets[0].id, statement.value))
        elif (
            isinstance(statement, ast.AugAssign)
            and isinstance(statement.target, ast.Name)
            and _pure(statement.value)
        ):
            name = statement.target.id
            value = ast.BinOp(
                left=ast.Name(name, ast.Load()), op=statement.op, right=statement.value
            )
            found.append((name, value))
        elif isinstance(statement, ast.Pass):
            continue
        else:
            return None
    return found


def _select(name: str, taken: ast.expr, kept: ast.expr) -> ast.stmt:
    call = ast.Call(
        func=ast.Name(SELECT, ast.Load()),
        args=[ast.Name(_CONDITION, ast.Load()), taken, kept],
        keywords=[],
    )
    return ast.Assign(targets=[ast.Name(name, ast.Store())], value=call)


class _Converter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.converted = 0
        self.entered = False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        if self.entered:
            return node  # a nested function: left alone
        self.entered = True
        self.generic_visit(node)
        return node

    def visit_If(self, node: ast.If) -> Any:
        self.generic_visit(node)
        taken = _assignments(node.body)
        kept = _assignments(node.orelse)
        if taken is None or kept is None or not (taken or kept) or not _pure(node.test):
            return node
        self.converted += 1
        selects = [_select(n, value, ast.Name(n, ast.Load())) for n, value in taken]
        selects += [_select(n, ast.Name(n, ast.Load()), value) for n, value in kept]
        condition = ast.Assign(targets=[ast.Name(_CONDITION, ast.Store())], value=node.test)
        uniform = ast.If(test=ast.Name(_CONDITION, ast.Load()), body=node.body, orelse=node.orelse)
        test = ast.Call(
            func=ast.Name(LANES_TEST, ast.Load()),
            args=[ast.Name(_CONDITION, ast.Load())],
            keywords=[],
        )
        return [condition, ast.If(test=test, body=selects, orelse=[uniform])]


def if_converted(function: types.FunctionType) -> types.CodeType | None:
    """``function``'s code with its convertible branches converted, or None."""
    if function in _CACHE:
        return _CACHE[function]
    result = _convert(function)
    _CACHE[function] = result
    return result


def _convert(function: types.FunctionType) -> types.CodeType | None:
    code = function.__code__
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None  # a lambda, or a def we cannot single out
    definition = tree.body[0]
    if definition.name != code.co_name:
        return None
    definition.decorator_list = []
    original = _compiled(copy.deepcopy(definition), code)
    if original is None or _shape(original) != _shape(code):
        return None  # the source found is not the code that runs (edited since)
    converter = _Converter()
    converter.visit(definition)
    if not converter.converted:
        return None
    return _compiled(definition, code)


def _shape(code: types.CodeType) -> tuple[Any, ...]:
    """What compiling the same source again gives alike (the bytecode itself can
    differ with the compiler's input, such as pytest's rewritten test modules)."""
    return (code.co_names, code.co_varnames, code.co_freevars, code.co_argcount)


def _compiled(definition: ast.FunctionDef, code: types.CodeType) -> types.CodeType | None:
    """``definition`` compiled as ``code`` was: its free variables stay free."""
    # compiled inside a function whose locals are the free variables, so that they
    # stay free variables (closure cells) of the compiled code
    outer = ast.FunctionDef(
        name="_pdc_outer",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(name) for name in code.co_freevars],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[],
        ),
        body=[definition, ast.Return(ast.Name(definition.name, ast.Load()))],
        decorator_list=[],
    )
    module = ast.Module(body=[outer], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, code.co_firstlineno - 1)
    try:
        compiled = compile(module, code.co_filename, "exec")
    except SyntaxError:
        return None
    outer_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    for constant in outer_code.co_consts:
        if isinstance(constant, types.CodeType) and constant.co_name == code.co_name:
            if set(constant.co_freevars) - set(code.co_freevars):
                return None
            return constant
    return None
