"""The conformance kit, run against the first-party CPU backend and the example backend."""

from __future__ import annotations

import pytest

from pdc_core import Backend
from pdc_core.testing import BackendConformance


class TestCpuBackend(BackendConformance):
    backend_name = "cpu"


class TestExampleThirdPartyBackend(BackendConformance):
    backend_name = "example"

    @pytest.fixture
    def backend(self, example_backend: Backend) -> Backend:
        return example_backend
