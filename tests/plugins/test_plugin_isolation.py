"""Plugins cannot end the process, impersonate first-party plugins or hide behind PDC_PLUGINS.

Regression tests for: ``sys.exit()`` in a plugin's import, hook, ``availability()`` or
``devices()`` ending the process; a distribution registering its own module under
the entry-point name ``cpu`` replacing the real CPU backend; a ``PDC_PLUGINS`` that
selects nothing claiming that an installed backend is missing; a backend whose
constructor or ``devices()`` raises leaking the raw exception from ``get_backend``.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections.abc import Callable, Iterator

import pytest

import pdc_core
from pdc_core import (
    BackendError,
    BackendUnavailable,
    EnvironmentSettingError,
    get_backend,
    list_plugins,
)
from pdc_core._cli import main

Select = Callable[[str], None]

EXITS_ON_IMPORT = """
import sys
sys.exit(3)
"""

EXITS_IN_HOOK = """
import sys
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_backends(register):
    sys.exit("bye from the hook")
"""

INTERRUPTED_IN_HOOK = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_backends(register):
    raise KeyboardInterrupt
"""

BACKEND_TEMPLATE = """
import sys
from pdc_example_backend import ExampleBackend
from pdc_core.backend import hookimpl

class {cls}(ExampleBackend):
    name = "{name}"
    distribution = "{dist}"
    priority = -10
{body}

@hookimpl
def pdc_register_backends(register):
    register({cls})
"""


def _backend_plugin(cls: str, name: str, dist: str, body: str = "") -> str:
    return BACKEND_TEMPLATE.format(cls=cls, name=name, dist=dist, body=body)


EXITS_IN_AVAILABILITY = _backend_plugin(
    "ExitingProbe",
    "exitprobe",
    "pdc-exitprobe",
    """
    @classmethod
    def availability(cls):
        sys.exit(4)
""",
)

EXITS_IN_DEVICES = _backend_plugin(
    "ExitingDevices",
    "exitdevices",
    "pdc-exitdevices",
    """
    @classmethod
    def devices(cls):
        sys.exit(5)
""",
)

RAISES_IN_INIT = _backend_plugin(
    "BrokenInit",
    "brokeninit",
    "pdc-brokeninit",
    """
    def __init__(self, device=0):
        raise RuntimeError("init exploded")
""",
)

RAISES_IN_DEVICES = _backend_plugin(
    "BrokenDevices",
    "brokendevices",
    "pdc-brokendevices",
    """
    @classmethod
    def devices(cls):
        raise OSError("no device list today")
""",
)

UNAVAILABLE_IN_INIT = _backend_plugin(
    "BusyInit",
    "busyinit",
    "pdc-busyinit",
    """
    def __init__(self, device=0):
        from pdc_core import BackendUnavailable
        raise BackendUnavailable("busyinit:0 is busy")
""",
)

# A third-party distribution that registers its own module under the name "cpu".
IMPOSTOR = _backend_plugin("ImpostorCpu", "cpu", "pdc-cpu")
THIRD_PARTY = _backend_plugin("ThirdParty", "thirdparty", "pdc-thirdparty")
CLASH_A = _backend_plugin("ClashA", "clash", "pdc-clash-a")
CLASH_B = _backend_plugin("ClashB", "clash", "pdc-clash-b")


@pytest.fixture
def select(monkeypatch: pytest.MonkeyPatch) -> Iterator[Select]:
    """``select("cpu")`` sets ``PDC_PLUGINS`` and reloads the plugins; undone afterwards."""

    def set_selection(value: str) -> None:
        monkeypatch.setenv("PDC_PLUGINS", value)
        pdc_core.reload_plugins()

    yield set_selection
    monkeypatch.delenv("PDC_PLUGINS", raising=False)
    pdc_core.reload_plugins()


def _plugins(name: str) -> dict[str | None, pdc_core.PluginInfo]:
    """The listed plugins called ``name``, by distribution."""
    return {info.distribution: info for info in list_plugins() if info.name == name}


def _cpu_is_real() -> bool:
    return type(get_backend("cpu")).__module__.startswith("pdc_cpu")


# -- SystemExit and other BaseExceptions are contained ----------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (EXITS_ON_IMPORT, "failed to load: SystemExit: 3"),
        (EXITS_IN_HOOK, "pdc_register_backends failed: SystemExit: bye from the hook"),
    ],
    ids=["import", "hook"],
)
def test_sys_exit_in_a_plugin_is_reported_not_obeyed(install_plugins, capsys, source, expected):
    install_plugins("pdc-exiter", {"exiter": "pdc_exiter"}, {"pdc_exiter": source})
    assert get_backend("cpu").name == "cpu"
    assert expected in _plugins("exiter")["pdc-exiter"].error

    with pytest.raises(BackendUnavailable) as caught:
        get_backend("nosuchbackend")
    assert f"exiter (pdc-exiter 1.0): {expected}" in str(caught.value)

    assert main(["plugins"]) == 0
    assert f"error:    {expected}" in capsys.readouterr().out
    assert main(["info", "--json"]) == 0
    assert expected in json.loads(capsys.readouterr().out)["plugin_errors"]["exiter"]
    assert main(["info"]) == 0
    assert "plugin exiter failed: " in capsys.readouterr().out


def test_keyboard_interrupt_in_a_plugin_is_not_contained(install_plugins):
    install_plugins("pdc-ctrlc", {"ctrlc": "pdc_ctrlc"}, {"pdc_ctrlc": INTERRUPTED_IN_HOOK})
    with pytest.raises(KeyboardInterrupt):
        list_plugins()


def test_sys_exit_in_availability_makes_the_backend_unavailable(
    install_plugins, example_backend_importable, capsys
):
    install_plugins(
        "pdc-exitprobe", {"exitprobe": "pdc_exitprobe"}, {"pdc_exitprobe": EXITS_IN_AVAILABILITY}
    )
    with pytest.raises(BackendUnavailable, match=r"availability\(\) raised SystemExit: 4"):
        get_backend("exitprobe")
    assert get_backend().name != "exitprobe"
    assert main(["info"]) == 0
    assert "exitprobe (pdc-exitprobe) - unavailable: availability() raised SystemExit: 4" in (
        capsys.readouterr().out
    )


def test_sys_exit_in_devices_becomes_a_backend_error(
    install_plugins, example_backend_importable, capsys
):
    install_plugins(
        "pdc-exitdevices", {"exitdevices": "pdc_exitdevices"}, {"pdc_exitdevices": EXITS_IN_DEVICES}
    )
    with pytest.raises(BackendError) as caught:
        get_backend("exitdevices")
    assert not isinstance(caught.value, BackendUnavailable)
    assert isinstance(caught.value.__cause__, SystemExit)
    assert "devices() raised SystemExit: 5" in str(caught.value)

    assert main(["info", "--json"]) == 0
    backends = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)["backends"]}
    assert "devices() raised SystemExit: 5" in backends["exitdevices"]["error"]
    assert backends["cpu"]["devices"]


# -- constructor and devices() failures --------------------------------------------------


def test_a_constructor_that_raises_gives_a_backend_error_naming_the_plugin(
    install_plugins, example_backend_importable
):
    install_plugins(
        "pdc-brokeninit", {"brokeninit": "pdc_brokeninit"}, {"pdc_brokeninit": RAISES_IN_INIT}
    )
    with pytest.raises(BackendError) as caught:
        get_backend("brokeninit")
    assert str(caught.value) == (
        "the brokeninit backend (BrokenInit, registered by plugin 'brokeninit' of "
        "pdc-brokeninit 1.0) failed to start on device 0: BrokenInit(device=0) raised "
        "RuntimeError: init exploded"
    )
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_devices_that_raise_give_a_backend_error_naming_the_plugin(
    install_plugins, example_backend_importable
):
    install_plugins(
        "pdc-brokendevices",
        {"brokendevices": "pdc_brokendevices"},
        {"pdc_brokendevices": RAISES_IN_DEVICES},
    )
    with pytest.raises(BackendError) as caught:
        get_backend("brokendevices:0")
    message = str(caught.value)
    assert (
        "the brokendevices backend (BrokenDevices, registered by plugin 'brokendevices'" in message
    )
    assert "pdc-brokendevices 1.0) failed to list its devices" in message
    assert "devices() raised OSError: no device list today" in message
    assert isinstance(caught.value.__cause__, OSError)


def test_a_backend_error_from_the_constructor_passes_through(
    install_plugins, example_backend_importable
):
    install_plugins(
        "pdc-busyinit", {"busyinit": "pdc_busyinit"}, {"pdc_busyinit": UNAVAILABLE_IN_INIT}
    )
    with pytest.raises(BackendUnavailable, match=r"^busyinit:0 is busy$"):
        get_backend("busyinit")


# -- plugins are identified by distribution ----------------------------------------------


@pytest.fixture
def impostor(install_plugins, example_backend_importable) -> None:
    install_plugins("pdc-impostor", {"cpu": "pdc_impostor"}, {"pdc_impostor": IMPOSTOR})


@pytest.mark.parametrize("selection", [None, "cpu", "CPU"])
def test_an_impostor_cannot_replace_a_first_party_plugin(impostor, select, selection, capsys):
    if selection is not None:
        select(selection)
    assert _cpu_is_real()
    assert "pdc_impostor" not in sys.modules
    plugins = _plugins("cpu")
    assert plugins["pdc-cpu"].loaded
    assert plugins["pdc-cpu"].backends == ["cpu"]
    error = plugins["pdc-impostor"].error
    assert error.startswith("refused: pdc-cpu and pdc-impostor both provide")
    assert "only pdc-cpu:cpu is loaded" in error
    assert "pdc-impostor:cpu" in error
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "cpu  (pdc-impostor 1.0)" in out
    assert "error:    refused: pdc-cpu and pdc-impostor" in out
    assert main(["info", "--json"]) == 0
    errors = json.loads(capsys.readouterr().out)["plugin_errors"]
    assert errors["pdc-impostor:cpu"].startswith("refused:")
    assert "cpu" not in errors


def test_an_impostor_is_loaded_only_when_named_by_distribution(impostor, select):
    """Named by distribution, its entry point loads; the backend name ``cpu`` still stays
    with pdc-cpu (issue 26, item 4), so its ``cpu`` backend is refused."""
    select("pdc-impostor:cpu")
    assert set(_plugins("cpu")) == {"pdc-impostor"}
    assert "pdc_impostor" in sys.modules
    assert _plugins("cpu")["pdc-impostor"].error == (
        "refused backend 'cpu': pdc-impostor registers it, but 'cpu' is reserved for the "
        "first-party pdc-cpu; a third-party backend needs a name of its own"
    )
    with pytest.raises(BackendUnavailable, match="unknown backend 'cpu'"):
        get_backend("cpu")


@pytest.fixture
def clash(install_plugins, example_backend_importable) -> None:
    install_plugins("pdc-clash-a", {"clash": "pdc_clash_a"}, {"pdc_clash_a": CLASH_A})
    install_plugins("pdc-clash-b", {"clash": "pdc_clash_b"}, {"pdc_clash_b": CLASH_B})


def test_a_name_two_distributions_claim_is_never_chosen_silently(clash, capsys):
    plugins = _plugins("clash")
    assert set(plugins) == {"pdc-clash-a", "pdc-clash-b"}
    for info in plugins.values():
        assert info.error.startswith("refused: pdc-clash-a and pdc-clash-b both provide")
        assert "pdc-clash-a:clash or pdc-clash-b:clash" in info.error
    with pytest.raises(BackendUnavailable, match="unknown backend 'clash'"):
        get_backend("clash")
    assert main(["plugins"]) == 0
    assert capsys.readouterr().out.count("error:    refused: pdc-clash-a and pdc-clash-b") == 2


def test_a_claimed_name_selects_nothing_but_dist_name_does(clash, select):
    select("cpu,clash")
    with pytest.warns(UserWarning, match="'clash' is provided by several distributions"):
        list_plugins()
    assert all(not info.loaded for info in _plugins("clash").values())

    select("pdc_clash.b:CLASH")  # distribution names are normalized, names case-insensitive
    assert type(get_backend("clash")).__name__ == "ClashB"
    assert set(_plugins("clash")) == {"pdc-clash-b"}


def test_a_third_party_name_provided_once_selects_it(
    install_plugins, example_backend_importable, select
):
    install_plugins(
        "pdc-thirdparty", {"thirdparty": "pdc_thirdparty"}, {"pdc_thirdparty": THIRD_PARTY}
    )
    for selection in (
        "thirdparty",
        "ThirdParty",
        "pdc-thirdparty:thirdparty",
        "PDC_ThirdParty:thirdparty",
    ):
        select(selection)
        assert {info.name for info in list_plugins()} == {"thirdparty"}
        assert get_backend("thirdparty").name == "thirdparty"


# -- PDC_PLUGINS that selects nothing -----------------------------------------------------


def test_names_are_case_insensitive_and_known_names_do_not_warn(select):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        select(" CPU , Cuda ")
        assert _cpu_is_real()
        assert "cpu" in {info.name for info in list_plugins()}


@pytest.mark.parametrize("selection", ["nonexistent", "*"])
def test_a_selection_of_nothing_is_warned_about_and_named_in_errors(select, selection):
    select(selection)
    with pytest.warns(UserWarning, match="no installed plugin is named") as caught:
        list_plugins()
    warning = str(caught[0].message)
    assert warning.startswith(
        f"PDC_PLUGINS={selection!r}: no installed plugin is named {selection!r}. "
        "Installed plugins: "
    )
    assert "cpu" in warning.partition("Installed plugins: ")[2].split(", ")

    with pytest.raises(BackendUnavailable) as unknown:
        get_backend("cpu")
    message = str(unknown.value)
    assert message.startswith(
        f"unknown backend 'cpu': pdc-cpu is installed (no need to pip install pdc-cpu), "
        f"but PDC_PLUGINS={selection!r} filtered out its plugin 'cpu'. "
        "Add cpu to PDC_PLUGINS, or unset PDC_PLUGINS."
    )
    assert "No backend is loaded." in message
    assert f"PDC_PLUGINS={selection!r} filtered out: " in message
    assert "cpu (pdc-cpu " in message
    assert f"PDC_PLUGINS entries that select no installed plugin: {selection!r}" in message

    with pytest.raises(EnvironmentSettingError) as none:
        get_backend()
    assert str(none.value).startswith(
        f"PDC_PLUGINS={selection!r}: no installed plugin is named {selection!r}; choices: "
    )


def test_a_filtered_third_party_backend_is_named(
    install_plugins, example_backend_importable, select
):
    install_plugins(
        "pdc-thirdparty", {"thirdparty": "pdc_thirdparty"}, {"pdc_thirdparty": THIRD_PARTY}
    )
    select("cpu")
    with pytest.raises(BackendUnavailable) as caught:
        get_backend("thirdparty")
    assert str(caught.value).startswith(
        "unknown backend 'thirdparty': PDC_PLUGINS='cpu' filtered out the installed plugin "
        "thirdparty (pdc-thirdparty 1.0), which probably provides it. Add thirdparty to "
        "PDC_PLUGINS, or unset PDC_PLUGINS."
    )


def test_pdc_plugins_command_says_what_was_filtered_out(select, capsys):
    select("cpu")
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cpu  (pdc-cpu ")
    assert "PDC_PLUGINS='cpu' filtered out: " in out


def test_an_explicit_first_party_selection_leaves_the_impostor_out(impostor, select):
    select("pdc-cpu:cpu")
    assert _cpu_is_real()
    assert set(_plugins("cpu")) == {"pdc-cpu"}
    assert "pdc_impostor" not in sys.modules


def test_a_first_party_name_never_selects_another_distribution():
    """Where pdc-cpu is missing, ``PDC_PLUGINS=cpu`` does not fall back to another ``cpu``."""
    from importlib.metadata import EntryPoint

    from pdc_core._plugins._discovery import _Candidate
    from pdc_core._plugins._selection import _plan

    impostor = _Candidate(EntryPoint("cpu", "pdc_impostor", "pdc"), "pdc-impostor", "1.0")
    plan = _plan([impostor], "cpu")
    assert plan.load == []
    assert plan.refused[impostor.key] == (
        "refused: pdc-impostor provides a pdc entry point named 'cpu', but 'cpu' in "
        "PDC_PLUGINS selects only the first-party pdc-cpu:cpu, which is not installed. "
        "Name this one pdc-impostor:cpu in PDC_PLUGINS to load it"
    )
    assert plan.warning is None  # a first-party name is known even where it is missing
    assert _plan([impostor], "pdc-impostor:cpu").load == [impostor]


def test_a_backend_refused_over_a_name_clash_is_reported_as_refused(clash, monkeypatch, capsys):
    """``PDC_BACKEND=clash pdc info`` with two distributions providing ``clash``: the
    error says pdc refused it, which distributions claim it and the PDC_PLUGINS value
    that loads each (keeping the plugins loaded now); the default backend shown is
    still the best available one."""
    monkeypatch.setenv("PDC_BACKEND", "clash")
    pdc_core.reload_plugins()
    assert main(["info"]) == 2
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1] == (
        "default backend: cpu, the best available, once PDC_BACKEND is fixed or unset "
        "(see the error)"
    )
    error = next(line for line in lines if line.startswith("error: PDC_BACKEND='clash'"))
    assert "no installed plugin provides it" not in error
    assert (
        "pdc refused the plugin 'clash': pdc-clash-a and pdc-clash-b both provide it, and "
        "pdc does not choose between them; set PDC_PLUGINS=" in error
    )
    fixes = re.findall(r"PDC_PLUGINS='([^']*)'", error)
    assert [fix.split(",")[-1] for fix in fixes] == ["pdc-clash-a:clash", "pdc-clash-b:clash"]
    assert all("cpu" in fix.split(",") for fix in fixes)
    assert main(["info", "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert (payload["default_backend"], payload["best_available"]) == (None, "cpu")
    # The value offered loads the plugin and keeps the default backend.
    monkeypatch.setenv("PDC_PLUGINS", fixes[0])
    monkeypatch.delenv("PDC_BACKEND")
    pdc_core.reload_plugins()
    assert get_backend("clash").name == "clash"
    assert pdc_core.get_backend().name == "cpu"
    monkeypatch.delenv("PDC_PLUGINS")
    pdc_core.reload_plugins()
    with pytest.raises(BackendUnavailable, match="unknown backend 'clash': pdc refused the"):
        get_backend("clash")
