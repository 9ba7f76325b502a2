"""Metal shader kernels compiled through ``mx.fast.metal_kernel``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from . import _mlx

__all__ = ["KernelRunner", "MetalKernel", "parse_kernel_options"]


class KernelRunner(Protocol):
    """What a kernel needs of its backend (``MetalBackend`` is one)."""

    @property
    def qualified_name(self) -> str:
        """``metal:N``."""

    def run(self, fn: Callable[..., Any], *inputs: Any, out: Any = None) -> Any:
        """Run ``fn`` on the inputs as MLX arrays; evaluated outputs (into ``out``)."""


_BOOLEAN = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _names(key: str, value: str) -> list[str]:
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names or not all(name.isidentifier() for name in names):
        raise ValueError(f"option {key}={value!r} must be a comma-separated list of identifiers")
    return names


def parse_kernel_options(options: Sequence[str]) -> dict[str, Any]:
    """Turn ``compile_kernel`` options (``"key=value"`` strings) into MLX's arguments.

    Recognised: ``input_names``, ``output_names`` (required), ``header``,
    ``ensure_row_contiguous``, ``atomic_outputs``. Anything else is a ``ValueError``
    naming the option.
    """
    if isinstance(options, str):
        raise TypeError("options must be a sequence of 'key=value' strings, not one string")
    settings: dict[str, Any] = {}
    for option in options:
        key, sep, value = str(option).partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"kernel option {option!r} is not of the form key=value")
        if key in ("input_names", "output_names"):
            settings[key] = _names(key, value)
        elif key == "header":
            settings[key] = value
        elif key in ("ensure_row_contiguous", "atomic_outputs"):
            flag = _BOOLEAN.get(value.strip().lower())
            if flag is None:
                raise ValueError(f"kernel option {key} must be true or false, not {value!r}")
            settings[key] = flag
        else:
            raise ValueError(
                f"unknown kernel option {key!r}; the metal backend knows input_names, "
                "output_names, header, ensure_row_contiguous and atomic_outputs"
            )
    missing = [key for key in ("input_names", "output_names") if key not in settings]
    if missing:
        raise ValueError(f"a Metal kernel needs the option(s): {', '.join(missing)}")
    return settings


class MetalKernel:
    """A compiled Metal kernel; call it with inputs and a launch configuration.

    ``kernel(*inputs, grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[...],
    output_dtypes=[...])`` converts the inputs like :meth:`MetalBackend.as_mlx`
    (zero-copy for metal buffers), runs the kernel on the Metal GPU and returns the
    evaluated outputs (one MLX array, or a list when there are several). With
    ``out=`` the outputs are also written into that memory.
    """

    def __init__(
        self, backend: KernelRunner, name: str, compiled: Any, settings: dict[str, Any]
    ) -> None:
        self.backend = backend
        self.name = name
        self.input_names: list[str] = settings["input_names"]
        self.output_names: list[str] = settings["output_names"]
        self._compiled = compiled

    def __call__(
        self,
        *inputs: Any,
        grid: tuple[int, int, int],
        threadgroup: tuple[int, int, int],
        output_shapes: Sequence[Sequence[int]],
        output_dtypes: Sequence[Any],
        template: Sequence[tuple[str, Any]] | None = None,
        init_value: float | None = None,
        out: Any = None,
    ) -> Any:
        if len(inputs) != len(self.input_names):
            raise ValueError(
                f"kernel {self.name!r} takes {len(self.input_names)} input(s) "
                f"({', '.join(self.input_names)}), got {len(inputs)}"
            )
        if len(output_shapes) != len(self.output_names) or len(output_dtypes) != len(
            self.output_names
        ):
            raise ValueError(
                f"kernel {self.name!r} has {len(self.output_names)} output(s) "
                f"({', '.join(self.output_names)}): give that many output_shapes and output_dtypes"
            )
        dtypes = [
            _mlx.to_mlx_dtype(np.dtype(dtype))
            if isinstance(dtype, np.dtype | type | str)
            else dtype
            for dtype in output_dtypes
        ]
        extra: dict[str, Any] = {}
        if template is not None:
            extra["template"] = list(template)
        if init_value is not None:
            extra["init_value"] = init_value

        def launch(*arrays: Any) -> Any:
            return self._compiled(
                inputs=list(arrays),
                grid=tuple(grid),
                threadgroup=tuple(threadgroup),
                output_shapes=[tuple(shape) for shape in output_shapes],
                output_dtypes=dtypes,
                **extra,
            )

        outputs = self.backend.run(launch, *inputs, out=out)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def __repr__(self) -> str:
        return f"<MetalKernel {self.name!r} on {self.backend.qualified_name}>"
