"""Handing a body to numba-cuda (used by GPU backends): :func:`to_numba`.

The body is rebound so that its ``cuda`` names numba's module, then compiled once per
body and options with ``numba.cuda.jit``; the result is cached per body.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

from ._rebinding import _python_function, _Rebinder

# --------------------------------------------------------------------------------------
# handing a body to numba-cuda (used by GPU backends)

_NUMBA_CACHE: weakref.WeakKeyDictionary[types.FunctionType, dict[Any, Any]] = (
    weakref.WeakKeyDictionary()
)
_NUMBA_LOCK = threading.Lock()


def to_numba(body: Callable[..., Any], **jit_options: Any) -> Any:
    """``numba.cuda.jit(**jit_options)`` of ``body``, with pdc's ``cuda`` names swapped for numba's.

    For GPU backends that run Python kernel bodies through numba-cuda
    (``pip install 'pdc-cuda[numba]'``). Functions of the body's module that it calls,
    and functions marked ``@cuda.jit(device=True)``, become numba device functions.
    The dispatcher is cached per body and options; launch it as
    ``dispatcher[grid, block, stream, shared_mem](*args)``. Raises ``ImportError``
    naming the package to install when numba is missing.
    """
    function = body if isinstance(body, types.FunctionType) else _python_function(body)
    if function is None:
        raise TypeError(f"a kernel body must be a Python function, not {body!r}")
    try:
        from numba import cuda as numba_cuda
    except ImportError as exc:
        raise ImportError(
            "running Python kernel bodies on a GPU needs numba-cuda: pip install 'pdc-cuda[numba]'"
        ) from exc
    key = tuple(sorted(jit_options.items()))
    with _NUMBA_LOCK:
        per_body = _NUMBA_CACHE.setdefault(function, {})
        dispatcher = per_body.get(key)
        if dispatcher is None:
            rebound = _Rebinder("numba", numba_cuda=numba_cuda).rebind(function)
            dispatcher = per_body[key] = numba_cuda.jit(**jit_options)(rebound)
    return dispatcher
