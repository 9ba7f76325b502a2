"""Body of PyDotCompute\'s :mod:`pdc_core.decorators.validators`; see its docstring."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union, get_args, get_origin

from pdc_core import Backpressure
from pdc_core.backend import DEFAULT_MAX_THREADS_PER_BLOCK, check_block, dims
from pdc_core.lowlevel import check_priority

from .._seed._ring_kernel import check_queue_size
from ..exceptions import InvalidConfigurationError, TypeValidationError

__all__ = [
    "RuntimeValidator",
    "get_validator",
    "validate_backpressure_strategy",
    "validate_block_size",
    "validate_config",
    "validate_grid_size",
    "validate_message",
    "validate_priority",
    "validate_queue_size",
]

_F = TypeVar("_F", bound=Callable[..., Any])
_C = TypeVar("_C", bound=type)
_R = TypeVar("_R")


def _as_configuration_error(name: str, value: object, check: Callable[[], _R]) -> _R:
    """``check()``, with its ``ValueError``/``TypeError`` raised as PyDotCompute's error."""
    try:
        return check()
    except (ValueError, TypeError) as error:
        raise InvalidConfigurationError(name, value, str(error)) from error


def validate_queue_size(size: int, name: str = "queue_size") -> int:
    """``size`` if pdc accepts it as a ring kernel's queue size (a positive int)."""
    return _as_configuration_error(name, size, lambda: check_queue_size(size, name))


def validate_grid_size(size: int | tuple[int, ...], name: str = "grid_size") -> tuple[int, ...]:
    """``size`` as a tuple if pdc accepts it as a grid (1 to 3 positive ints)."""
    return _as_configuration_error(name, size, lambda: dims(size, name))


def validate_block_size(
    size: int | tuple[int, ...],
    name: str = "block_size",
    max_threads: int = DEFAULT_MAX_THREADS_PER_BLOCK,
) -> tuple[int, ...]:
    """``size`` as a tuple if pdc accepts it as a block of at most ``max_threads``."""

    def check() -> tuple[int, ...]:
        block = dims(size, name)
        check_block(block, max_threads)
        return block

    return _as_configuration_error(name, size, check)


def validate_priority(priority: int) -> int:
    """``priority`` if pdc accepts it as a message priority (an int in 0..255)."""
    return _as_configuration_error("priority", priority, lambda: check_priority(priority))


def validate_backpressure_strategy(strategy: str) -> str:
    """``strategy`` if :class:`~pdc_core.Backpressure` accepts the name."""
    _as_configuration_error(
        "backpressure_strategy", strategy, lambda: Backpressure.coerce(strategy)
    )
    return strategy


def _not_a_dataclass(cls: type) -> TypeValidationError:
    return TypeValidationError(
        expected=type, actual=cls, context=f"message class {cls.__name__}: not a dataclass"
    )


def validate_message(cls: _C) -> _C:
    """Class decorator: ``cls`` unchanged if it is a dataclass, else
    ``TypeValidationError`` (pdc's ``@message`` makes a message dataclass). A dataclass
    without ``serialize()`` (not a :class:`~pdc_core.Message`) gets a ``UserWarning``:
    it can travel between actors, but not be turned into bytes."""
    if not dataclasses.is_dataclass(cls):
        raise _not_a_dataclass(cls)
    if not hasattr(cls, "serialize"):
        warnings.warn(
            f"message class {cls.__name__!r} has no serialize(), so it cannot be turned "
            "into bytes: decorate it with @message or derive it from pdc_core.Message",
            stacklevel=2,
        )
    return cls


def _check_type(value: Any, expected: Any) -> bool:
    """Whether ``value`` fits the annotation ``expected`` (classes, ``Any``, unions,
    ``list[X]`` and ``dict[K, V]`` checked item by item; other generics by origin)."""
    if expected is Any:
        return True
    origin = get_origin(expected)
    if origin is None:
        return isinstance(value, expected)
    args = get_args(expected)
    if origin is Union or origin is types.UnionType:
        return any(_check_type(value, arg) for arg in args)
    if not isinstance(value, origin):
        return False
    if origin is list and args:
        return all(_check_type(item, args[0]) for item in value)
    if origin is dict and len(args) == 2:
        return all(_check_type(k, args[0]) and _check_type(v, args[1]) for k, v in value.items())
    return True


def validate_config(config_cls: type) -> Callable[[_F], _F]:
    """Decorator: check each argument of the function that ``config_cls`` annotates
    (``TypeValidationError`` when one does not fit), then call it."""
    hints: Mapping[str, Any] = inspect.get_annotations(config_cls, eval_str=True)

    def decorate(func: _F) -> _F:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            for name, value in bound.arguments.items():
                if name in hints and not _check_type(value, hints[name]):
                    raise TypeValidationError(hints[name], type(value), f"parameter '{name}'")
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


#: PyDotCompute's kernel configuration keys, and the check of each.
_CONFIG_CHECKS: dict[str, Callable[[Any], Any]] = {
    "queue_size": validate_queue_size,
    "input_queue_size": lambda size: validate_queue_size(size, "input_queue_size"),
    "output_queue_size": lambda size: validate_queue_size(size, "output_queue_size"),
    "grid_size": validate_grid_size,
    "block_size": validate_block_size,
    "backpressure_strategy": validate_backpressure_strategy,
}


class RuntimeValidator:
    """Checks message classes and kernel configurations; ``strict=False`` records a
    warning instead of raising for a message class that is not a dataclass."""

    def __init__(self, strict: bool = True) -> None:
        self._strict = strict
        self._warnings: list[str] = []

    @property
    def strict(self) -> bool:
        """Whether a bad message class raises (else it is a warning)."""
        return self._strict

    @property
    def warnings(self) -> list[str]:
        """A copy of the warnings recorded so far."""
        return list(self._warnings)

    def validate_message_type(self, cls: type) -> bool:
        """Whether ``cls`` is a dataclass; if not, raise (strict) or record a warning."""
        if dataclasses.is_dataclass(cls):
            return True
        if self._strict:
            raise _not_a_dataclass(cls)
        self._warnings.append(str(_not_a_dataclass(cls)))
        return False

    def validate_kernel_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` with each known key checked (and grid/block sizes made tuples)."""
        return {
            key: _CONFIG_CHECKS[key](value) if key in _CONFIG_CHECKS else value
            for key, value in config.items()
        }

    def clear_warnings(self) -> None:
        """Forget the recorded warnings."""
        self._warnings.clear()


_validator: RuntimeValidator | None = None


def get_validator(strict: bool = True) -> RuntimeValidator:
    """The process's :class:`RuntimeValidator` (made with ``strict`` on first use)."""
    global _validator
    if _validator is None:
        _validator = RuntimeValidator(strict=strict)
    return _validator
