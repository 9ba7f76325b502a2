"""Unusable ``PDC_BACKEND`` and ``PDC_PLUGINS`` values: a one-line error in every ``pdc``
command and an :class:`~pdc_core.EnvironmentSettingError` in the API, never a traceback.

Regression test for issue 27, item 4: ``PDC_BACKEND`` naming an unknown or unavailable
backend made ``pdc demo`` print a 15-line traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

import pdc_core
from pdc_core import BackendUnavailable, EnvironmentSettingError, get_backend
from pdc_core._cli import main
from pdc_core._cli._main import COMMANDS

GHOST = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import Availability, hookimpl

class GhostBackend(ExampleBackend):
    name = "ghost"
    distribution = "pdc-ghost"
    priority = -10

    @classmethod
    def availability(cls):
        return Availability.no("no ghost device attached")

@hookimpl
def pdc_register_backends(register):
    register(GhostBackend)
"""

Setting = Callable[[str, str], None]


@pytest.fixture
def setting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Setting]:
    """``setting("PDC_BACKEND", value)`` sets it and reloads the plugins; undone afterwards."""

    def set_value(variable: str, value: str) -> None:
        monkeypatch.setenv(variable, value)
        pdc_core.reload_plugins()

    yield set_value
    monkeypatch.delenv("PDC_BACKEND", raising=False)
    monkeypatch.delenv("PDC_PLUGINS", raising=False)
    pdc_core.reload_plugins()


@pytest.fixture
def ghost(install_plugins, example_backend_importable) -> None:
    """An installed backend, ``ghost``, that is unavailable here."""
    install_plugins("pdc-ghost", {"ghost": "pdc_ghost"}, {"pdc_ghost": GHOST})


# (variable, value, reason): each value a user could plausibly end up with.
BAD_BACKENDS = [
    ("PDC_BACKEND", "nope", "no backend is named 'nope': no installed plugin provides it"),
    ("PDC_BACKEND", "ghost", "the ghost backend is unavailable here: no ghost device attached"),
    ("PDC_BACKEND", "   ", "it is blank, so it names no backend"),
    ("PDC_BACKEND", ",,,", "it takes one backend name (PDC_PLUGINS takes a list)"),
    ("PDC_BACKEND", "cpu,ghost", "it takes one backend name (PDC_PLUGINS takes a list)"),
    ("PDC_BACKEND", "cpü", "no backend is named 'cpü': no installed plugin provides it"),
    ("PDC_BACKEND", "cpu:x", "the part after ':' must be a device index, as in 'cuda:1'"),
    ("PDC_BACKEND", "cpu:-1", "device index is negative"),
    ("PDC_BACKEND", "cpu:99", "the cpu backend has no device 99 (1 device(s))"),
]
BAD_PLUGINS = [
    ("PDC_PLUGINS", "nope", "no installed plugin is named 'nope'"),
    ("PDC_PLUGINS", "cpu,nope", "no installed plugin is named 'nope'"),
    ("PDC_PLUGINS", "ghost", "no backend it loads can run here (ghost: no ghost device attached)"),
    ("PDC_PLUGINS", "ray", "it loads no backend"),
    ("PDC_PLUGINS", "  ", "it is blank, so it names no plugin"),
    ("PDC_PLUGINS", ",,,", "it names no plugin (only commas and blanks)"),
    ("PDC_PLUGINS", " , ,", "it names no plugin (only commas and blanks)"),
    # repr() shows the invisible character: 'cpü\\u200b'
    ("PDC_PLUGINS", "cpü\u200b", "no installed plugin is named " + repr("cpü\u200b")),
]
BAD = BAD_BACKENDS + BAD_PLUGINS


def _skip_without(value: str) -> None:
    if value == "ray" and not any(info.name == "ray" for info in pdc_core.list_plugins()):
        pytest.skip("needs pdc-ray installed")


# The loader also warns about a PDC_PLUGINS name it cannot find when it loads (that
# warning is pinned in tests/plugins/test_plugin_isolation.py); these tests are about the
# error that follows.
@pytest.mark.filterwarnings("ignore:PDC_PLUGINS=.*no installed plugin is named:UserWarning")
@pytest.mark.parametrize(("variable", "value", "reason"), BAD)
def test_the_api_raises_a_documented_one_line_error(ghost, setting, variable, value, reason):
    _skip_without(value)
    setting(variable, value)
    with pytest.raises(EnvironmentSettingError) as caught:
        get_backend()
    error = caught.value
    assert isinstance(error, BackendUnavailable)
    assert isinstance(error, LookupError)
    assert (error.variable, error.value, error.reason) == (variable, value, reason)
    message = str(error)
    assert "\n" not in message
    assert message.startswith(f"{variable}={value!r}: {reason}; choices: ")
    assert message.endswith(f" (or unset {variable})")
    assert error.choices  # there is always something that works here (the cpu plugin)
    with pytest.raises(EnvironmentSettingError):
        pdc_core._plugins.default_backend_name()


def test_the_choices_are_what_would_work(ghost, setting):
    setting("PDC_BACKEND", "nope")
    with pytest.raises(EnvironmentSettingError) as caught:
        get_backend()
    assert "cpu" in caught.value.choices
    assert "ghost" not in caught.value.choices  # installed, but it cannot run here
    setting("PDC_BACKEND", "cpu:99")
    with pytest.raises(EnvironmentSettingError) as caught:
        get_backend()
    assert caught.value.choices == ("cpu:0",)
    setting("PDC_PLUGINS", "nope")
    with (
        pytest.warns(UserWarning, match="no installed plugin is named 'nope'"),
        pytest.raises(EnvironmentSettingError) as caught,
    ):
        get_backend()
    assert {"cpu", "ghost"} <= set(caught.value.choices)


def test_good_and_empty_values_are_accepted(ghost, setting):
    for variable, value in [
        ("PDC_BACKEND", ""),  # empty is unset
        ("PDC_BACKEND", " CPU "),  # names are case-insensitive, blanks around are ignored
        ("PDC_BACKEND", "cpu:0"),
        ("PDC_PLUGINS", ""),
        ("PDC_PLUGINS", " CPU , ghost"),
        ("PDC_PLUGINS", "cpu,cuda"),  # a first-party name is known even where it is missing
    ]:
        setting(variable, value)
        assert get_backend().name == "cpu", (variable, value)
        pdc_core._plugins.check_environment()


def test_an_explicit_name_does_not_depend_on_pdc_backend(setting):
    setting("PDC_BACKEND", "nope")
    assert get_backend("cpu").name == "cpu"


def test_a_filtered_out_backend_says_so(ghost, setting):
    setting("PDC_PLUGINS", "cpu")
    setting("PDC_BACKEND", "ghost")
    with pytest.raises(EnvironmentSettingError) as caught:
        get_backend()
    assert caught.value.reason == (
        "no backend is named 'ghost': PDC_PLUGINS filtered out the plugin "
        "ghost (pdc-ghost 1.0) that provides it"
    )


# -- the pdc command ---------------------------------------------------------------------

#: Arguments that make each command quick if it ran (it must not: the check comes first).
QUICK = {"demo": ["--messages", "10"], "bench": ["--quick", "--n", "10", "--rounds", "1"]}


def _argv(command: str) -> list[str]:
    return [command, *QUICK.get(command, [])]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("variable", "value", "reason"), [BAD[0], BAD[1], BAD[2], BAD_PLUGINS[0], BAD_PLUGINS[5]]
)
def test_every_command_gives_a_one_line_error(
    ghost, setting, capsys, command, variable, value, reason
):
    setting(variable, value)
    assert main(_argv(command)) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"pdc {command}: error: {variable}={value!r}: {reason}; choices: ")
    assert "Traceback" not in captured.err
    if command not in ("info", "plugins"):
        assert captured.out == ""  # nothing ran


def test_info_and_plugins_still_report_and_carry_the_error(ghost, setting, capsys):
    setting("PDC_BACKEND", "ghost")
    assert main(["info", "--json"]) == 2
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert payload["default_backend"] is None
    (error,) = payload["errors"]
    assert error.startswith("PDC_BACKEND='ghost': the ghost backend is unavailable here")
    assert captured.err == f"pdc info: error: {error}\n"
    assert main(["info"]) == 2
    assert f"error: {error}\n" in capsys.readouterr().out
    assert main(["plugins", "--json"]) == 2
    captured = capsys.readouterr()
    assert {plugin["name"] for plugin in json.loads(captured.out)} >= {"cpu", "ghost"}
    assert captured.err == f"pdc plugins: error: {error}\n"


def test_an_explicit_backend_option_ignores_pdc_backend(setting, capsys):
    setting("PDC_BACKEND", "nope")
    assert main(["demo", "--backend", "cpu", "--messages", "200", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "cpu:0"


def test_a_good_environment_still_runs(setting, capsys):
    setting("PDC_BACKEND", "cpu")
    setting("PDC_PLUGINS", "cpu")
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["errors"] == []


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "pdc_core", "demo", "--messages", "10"],
        [sys.executable, "-m", "pdc_core", "info"],
        [sys.executable, "-c", "from pdc_core._cli import main; raise SystemExit(main())", "bench"],
    ],
    ids=["python-m-demo", "python-m-info", "console-entry-bench"],
)
@pytest.mark.parametrize(
    ("variable", "value"),
    [("PDC_BACKEND", "cüda"), ("PDC_PLUGINS", ",,,")],
    ids=["backend", "plugins"],
)
def test_a_process_prints_one_line_and_no_traceback(argv, variable, value):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("PDC_BACKEND", "PDC_PLUGINS")}
    env[variable] = value
    env["PYTHONIOENCODING"] = "utf-8"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, done.stderr
    assert f"error: {variable}={value!r}: " in errors[0]
    assert errors[0].endswith(f"(or unset {variable})")
