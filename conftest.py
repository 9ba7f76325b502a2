"""Root conftest: every ``async def`` test in the repository runs under asyncio and trio."""

pytest_plugins = ["pdc_core.testing.pytest_plugin"]
