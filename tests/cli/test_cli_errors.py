"""Errors of the ``pdc`` command: an installed backend that cannot run is named as such,
and ``--json`` always puts a JSON document on stdout, errors included."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pdc_core._cli import main

UNAVAILABLE = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import Availability, hookimpl

class GoneBackend(ExampleBackend):
    name = "gone"
    distribution = "pdc-gone"
    priority = 1

    @classmethod
    def availability(cls):
        return Availability.no("no Gone device here (install its driver)")

@hookimpl
def pdc_register_backends(register):
    register(GoneBackend)
"""


@pytest.fixture
def gone(install_plugins: Callable[..., object], example_backend_importable: None) -> None:
    install_plugins("pdc-gone", {"gone": "pdc_gone"}, {"pdc_gone": UNAVAILABLE})


@pytest.mark.usefixtures("gone")
@pytest.mark.parametrize("command", ["check", "demo"])
def test_an_installed_backend_that_cannot_run_is_named_with_its_reason(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--backend", "gone"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"pdc {command}: error: argument --backend: the gone backend (pdc-gone) is installed "
        "but cannot run here: no Gone device here (install its driver); choose from 'cpu'"
    )  # the option was right: no usage line before the error
    assert "usage:" not in err
    assert "invalid choice" not in err


@pytest.mark.usefixtures("gone")
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["check", "--backend", "gone", "--json"], "is installed but cannot run here"),
        (["check", "--backend", "nope", "--json"], "invalid choice: 'nope'"),
        (["check", "--async-backend", "curio", "--json"], "invalid choice: 'curio'"),
        (["check", "--requests", "0", "--json"], "--requests must be at least 1"),
        (["bench", "--n", "0", "--json"], "--n must be at least 1, got 0"),
        (["info", "--json", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_json_errors_are_json_on_stdout(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        status = int(exit_.code or 0)
    assert status == 2
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["ok"] is False
    assert document["status"] == 2
    assert says in document["error"]
    assert says in err  # and the usual line on stderr


def test_an_unusable_setting_is_json_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PDC_BACKEND", "no-such-backend")
    assert main(["check", "--json"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert "PDC_BACKEND" in document["error"]


def test_without_json_stdout_stays_empty(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--backend", "nope"]) == 2
    assert capsys.readouterr().out == ""


@pytest.mark.usefixtures("gone")
def test_where_nothing_can_run_one_line_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As with only pdc-cuda installed on a machine without a GPU."""
    from pdc_core._cli import _options

    only_gone = [i for i in _options.available_backends() if i.name == "gone"]
    monkeypatch.setattr(_options, "available_backends", lambda: only_gone)
    monkeypatch.setattr("pdc_core._plugins._registry.available_backends", lambda: only_gone)
    assert main(["demo"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        "pdc demo: error: no pdc backend can run here (gone (pdc-gone): no Gone device here "
        "(install its driver)). Install the cpu backend: pip install pdc-cpu (from a clone "
        "of pdc: pip install ./plugins/pdc_cpu)"
    )
