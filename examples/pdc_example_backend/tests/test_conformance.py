from pdc_core.testing import BackendConformance


class TestExampleBackend(BackendConformance):
    backend_name = "example"
