"""Mutation tests of the conformance kit: it fails a backend with a planted bug.

Each mutant in ``conformance_mutants`` is the example backend (a simulated discrete
device) with one bug planted. It is installed as a plugin for the duration of a test,
and every check of :class:`~pdc_core.testing.BackendConformance` is run against it
programmatically, as pytest would (parametrized checks once per parameter; async checks
under anyio; a skip is a skip, any other exception a failure). The kit must fail the
checks named by the mutant's ``caught_by``, and must pass the unmodified example
backend (with and without persistent kernels) on every check.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from types import ModuleType
from typing import Any

import anyio
import pytest

import pdc_core
from pdc_core import Backend
from pdc_core.testing import BackendConformance

KIT_TIMEOUT = 0.5  # seconds: a stuck call fails the check after this long


@pytest.fixture
def mutants(install_plugins: Any, example_backend_importable: None) -> ModuleType:
    """``conformance_mutants``, installed as a plugin for this test."""
    module = importlib.import_module("support.conformance_mutants")
    install_plugins(module.DISTRIBUTION, {"mutants": "support.conformance_mutants"})
    return module


def run_kit(backend: Backend) -> dict[str, str]:
    """Every check of the kit against ``backend``: ``{check: "passed" | "skipped" | why}``."""

    class Kit(BackendConformance):
        backend_name = backend.name
        timeout = KIT_TIMEOUT

    kit = Kit()
    outcomes: dict[str, str] = {}
    for name in sorted(dir(Kit)):
        if not name.startswith("test_"):
            continue
        method = getattr(kit, name)
        params: list[tuple[Any, ...]] = [()]
        for mark in getattr(method, "pytestmark", []):
            if mark.name == "parametrize":
                params = [(value,) for value in mark.args[1]]
        for args in params:
            label = f"{name}[{args[0]}]" if args else name
            try:
                if inspect.iscoroutinefunction(method):
                    anyio.run(functools.partial(method, backend, *args))
                else:
                    method(backend, *args)
            except pytest.skip.Exception:
                outcomes[label] = "skipped"
            except (Exception, pytest.fail.Exception) as exc:
                outcomes[label] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            else:
                outcomes[label] = "passed"
    return outcomes


def failed(outcomes: dict[str, str]) -> dict[str, str]:
    return {label: why for label, why in outcomes.items() if why not in ("passed", "skipped")}


@pytest.mark.parametrize("name", ["mutant_none", "mutant_persistent_ok"])
def test_the_kit_passes_the_unmodified_example_backend(mutants: ModuleType, name: str) -> None:
    backend = pdc_core.get_backend(name)
    outcomes = run_kit(backend)
    assert failed(outcomes) == {}
    passed = {label for label, why in outcomes.items() if why == "passed"}
    assert "test_host_to_device_copies_are_copies" in passed
    if name == "mutant_persistent_ok":  # the persistent checks really ran
        assert {
            "test_persistent_kernel_request",
            "test_persistent_kernel_batches",
            "test_persistent_kernel_pause_and_resume",
            "test_persistent_kernel_drain_stop_answers_everything",
            "test_persistent_kernel_stop_now",
            "test_persistent_kernel_error_word",
            "test_persistent_kernel_state",
        } <= passed


@pytest.mark.parametrize(
    "name",
    [
        "mutant_shared_to_device",
        "mutant_shared_to_host",
        "mutant_dtype_ignored",
        "mutant_shape_ignored",
        "mutant_stuck_event",
        "mutant_reordering_stream",
        "mutant_lost_error_word",
        "mutant_default_state_hooks",
    ],
)
def test_the_kit_fails_each_planted_bug(mutants: ModuleType, name: str) -> None:
    backend = pdc_core.get_backend(name)
    try:
        outcomes = run_kit(backend)
    finally:
        backend.close()  # type: ignore[attr-defined]  # frees calls left stuck
    failures = failed(outcomes)
    caught = {label.partition("[")[0] for label in failures}
    assert backend.caught_by <= caught, (  # type: ignore[attr-defined]
        f"{backend.bug}: the kit missed it; failures: {failures}"  # type: ignore[attr-defined]
    )


def test_every_mutant_is_exercised(mutants: ModuleType) -> None:
    names = {cls.name for cls in mutants.MUTANTS}
    params = test_the_kit_fails_each_planted_bug.pytestmark[0].args[1]  # type: ignore[attr-defined]
    assert names == set(params)


def test_a_stuck_call_fails_within_the_timeout(mutants: ModuleType) -> None:
    backend = pdc_core.get_backend("mutant_stuck_event")

    class Kit(BackendConformance):
        backend_name = backend.name
        timeout = 0.2

    try:
        with pytest.raises(pytest.fail.Exception, match=r"did not .* within 0\.2 s"):
            Kit().test_recorded_event_completes(backend)
    finally:
        backend.close()  # type: ignore[attr-defined]
