"""``HostWorkerKernel``'s state hooks on a backend whose ``DEVICE`` memory is a wrapper
(the example backend's ``DeviceArray``): the defaults say which hooks to override."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from pdc_core import BackendError, PersistentKernel, PersistentKernelSession
from pdc_core.backend import HostWorkerKernel


@pytest.fixture
def mutants(install_plugins: Any, example_backend_importable: None) -> ModuleType:
    module = importlib.import_module("support.conformance_mutants")
    install_plugins(module.DISTRIBUTION, {"mutants": "support.conformance_mutants"})
    return module


def _counting(backend: str) -> PersistentKernel:
    def body(requests: Any, state: Any) -> Any:
        state[0] += len(requests)
        return requests

    return PersistentKernel(
        "counting", np.float32, np.float32, capacity=8, state=np.zeros(1, np.float32)
    ).add_body(backend, body)


async def test_the_default_make_state_names_the_hooks_and_starts_nothing(
    mutants: ModuleType,
) -> None:
    backend = mutants.DefaultStateHooks()
    with pytest.raises(BackendError) as caught:
        await PersistentKernelSession.start(_counting(backend.name), backend)
    message = str(caught.value)
    assert "persistent kernel 'counting' has state" in message
    assert "DEVICE memory is pdc_example_backend.DeviceArray, not a NumPy array" in message
    assert "override make_state (and state_to_host, to read it back" in message
    assert not [t for t in threading.enumerate() if t.name.endswith("-kernel-counting")]


async def test_the_default_state_to_host_refuses_what_is_not_the_state(
    mutants: ModuleType,
) -> None:
    class MakeStateOnly(mutants.ExampleWorkerKernel):  # type: ignore[name-defined,misc]
        state_to_host = HostWorkerKernel.state_to_host  # forgotten: np.array(DeviceArray)

    backend = mutants.PersistentExample()
    backend.resident_type = MakeStateOnly
    session = await PersistentKernelSession.start(_counting(backend.name), backend)
    try:
        assert float(await session.request(np.float32(2.0))) == 2.0
        await session.pause()
        with pytest.raises(BackendError, match=r"override state_to_host \(with make_state\)"):
            session.read_state()
    finally:
        await session.stop()


async def test_overridden_hooks_keep_the_state_on_the_device(mutants: ModuleType) -> None:
    backend = mutants.PersistentExample()
    session = await PersistentKernelSession.start(_counting(backend.name), backend)
    try:
        await session.request_batch(np.arange(5, dtype=np.float32))
        await session.pause()
        state = session.read_state()
    finally:
        await session.stop()
    assert isinstance(state, np.ndarray)
    assert state.tolist() == [5.0]
