"""Test support for pdc and for third-party backends.

``pdc_core.testing.pytest_plugin`` runs every ``async def`` test under asyncio and
trio; enable it with ``pytest_plugins = ["pdc_core.testing.pytest_plugin"]`` in a
``conftest.py``.
"""
