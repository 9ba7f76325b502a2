pytest_plugins = ["pdc_core.testing.pytest_plugin"]
