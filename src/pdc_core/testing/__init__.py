"""Test support for pdc and for third-party backends.

- :class:`BackendConformance`: the conformance suite; subclass it in your plugin's
  tests and set ``backend_name``.
- ``pdc_core.testing.pytest_plugin``: runs every ``async def`` test under asyncio
  and trio; enable it with ``pytest_plugins = ["pdc_core.testing.pytest_plugin"]``
  in a ``conftest.py``.

This package needs pytest, which pdc-core itself does not depend on.
"""

from .._publish import publish
from ._conformance import BackendConformance

__all__ = ["BackendConformance"]

publish(__name__, globals(), __all__)
