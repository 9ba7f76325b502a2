"""Mutation tests of the handle conformance kit: it fails a handle with a planted bug.

``support.handle_mutants`` has a toy kind of actor whose handle implements delivery
only, and mutants of that handle that each rewrite one rule and get it wrong. Every
check of :class:`~pdc_core.testing.ActorRefConformance` is run against each, as pytest
would (each parameter, under asyncio and trio; a skip is a skip, any other exception a
failure). The kit passes the correct toy on every check and fails each mutant on the
checks its ``caught_by`` names.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import anyio
import pytest
from support.handle_mutants import MUTANTS, ToyTarget

from pdc_core import ActorNursery, ActorRef
from pdc_core.testing import ActorRefConformance, Echo

KIT_LIMIT = 5.0


def run_kit(target: type[ToyTarget], backend: str) -> dict[str, str]:
    """Every check of the kit against ``target``'s handles under ``backend``:
    ``{check: "passed" | "skipped" | why}``."""

    class Kit(ActorRefConformance):
        limit = KIT_LIMIT

        async def start(self, nursery: ActorNursery, echo: Echo) -> ActorRef[Any, Any]:
            return await nursery.start_actor(target(echo.key))

        def tracked(self, ref: ActorRef[Any, Any]) -> int | None:
            return len(ref._runner.tracked)  # type: ignore[attr-defined]

    kit = Kit()
    outcomes: dict[str, str] = {}
    for name in sorted(dir(Kit)):
        if not name.startswith("test_"):
            continue
        method = getattr(kit, name)
        assert inspect.iscoroutinefunction(method)
        params: list[tuple[Any, ...]] = [()]
        for mark in getattr(method, "pytestmark", []):
            if mark.name == "parametrize":
                params = [(value,) for value in mark.args[1]]
        for args in params:
            label = f"{name}[{args[0]}]" if args else name
            try:
                anyio.run(functools.partial(method, *args), backend=backend)
            except pytest.skip.Exception:
                outcomes[label] = "skipped"
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                outcomes[label] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            else:
                outcomes[label] = "passed"
    return outcomes


def failed(outcomes: dict[str, str]) -> dict[str, str]:
    return {label: why for label, why in outcomes.items() if why not in ("passed", "skipped")}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_kit_passes_the_correct_toy(backend: str) -> None:
    outcomes = run_kit(ToyTarget, backend)
    assert failed(outcomes) == {}
    assert "skipped" not in outcomes.values()
    assert len(outcomes) >= 20  # every check ran, each parameter apart


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda cls: cls.__name__)
def test_the_kit_fails_each_planted_bug(mutant: type[ToyTarget], backend: str) -> None:
    failures = failed(run_kit(mutant, backend))
    caught = {label.partition("[")[0] for label in failures}
    assert mutant.caught_by <= caught, f"{mutant.bug}: the kit missed it; failures: {failures}"


def test_every_rule_has_a_mutant() -> None:
    caught = set().union(*(mutant.caught_by for mutant in MUTANTS))
    checks = {name for name in dir(ActorRefConformance) if name.startswith("test_")}
    assert caught <= checks
    assert len(MUTANTS) >= 5
    # Every rule of the issue: priority (order/default, range, numpy), timeouts, stop
    # and cancel while asking, drain admission, empty batches, ask_many order.
    assert len(caught) >= 9
