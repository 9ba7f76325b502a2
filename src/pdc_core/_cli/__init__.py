"""The ``pdc`` command: ``info``, ``plugins``, ``demo`` and ``bench``. The application
layer on top of the library; ``rich`` is imported here only."""

from ._main import main

__all__ = ["main"]
