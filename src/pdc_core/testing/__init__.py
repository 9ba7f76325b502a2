"""Test support for pdc and for third-party backends.

- :class:`BackendConformance`: the conformance suite; subclass it in your plugin's
  tests and set ``backend_name``.
- ``pdc_core.testing.pytest_plugin``: fixtures ``actor_nursery`` and
  ``ring_kernel_runtime`` for tests that anyio's pytest plugin runs
  (``@pytest.mark.anyio``); pytest loads it through its ``pytest11`` entry point.

This package needs pytest: ``pip install 'pdc-core[testing]'``.
"""

from .._publish import publish
from ._conformance import BackendConformance

__all__ = ["BackendConformance"]

publish(__name__, globals(), __all__)
