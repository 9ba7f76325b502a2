"""The plugin loader: discovery, isolation of broken plugins, selection and lookup."""

from __future__ import annotations

import json

import pytest
from support.placement_plugin import HERE_PLACEMENT

import pdc_core
from pdc_core import BackendUnavailable, get_backend, list_plugins
from pdc_core._cli import main

THIRD_PARTY = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import hookimpl

class ThirdPartyBackend(ExampleBackend):
    name = "thirdparty"
    distribution = "pdc-thirdparty"
    priority = 5

@hookimpl
def pdc_register_backends(register):
    register(ThirdPartyBackend)
"""

BROKEN_IMPORT = """
raise ImportError("this plugin is deliberately broken")
"""

HOOK_RAISES = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_backends(register):
    raise RuntimeError("boom in the hook")
"""

RETURNS_GARBAGE = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_backends(register):
    return [42]
"""

REGISTERS_GARBAGE = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_backends(register):
    register("not a backend class")
"""

UNAVAILABLE = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import Availability, hookimpl

class GhostBackend(ExampleBackend):
    name = "ghost"
    distribution = "pdc-ghost"
    priority = 1000

    @classmethod
    def availability(cls):
        return Availability.no("no ghost device attached")

@hookimpl
def pdc_register_backends(register):
    register(GhostBackend)
"""


@pytest.fixture
def third_party(install_plugins, example_backend_importable):
    install_plugins(
        "pdc-thirdparty", {"thirdparty": "pdc_thirdparty"}, {"pdc_thirdparty": THIRD_PARTY}
    )
    install_plugins("pdc-broken", {"broken": "pdc_broken"}, {"pdc_broken": BROKEN_IMPORT})


def _by_name():
    return {info.name: info for info in list_plugins()}


def test_first_party_cpu_plugin_is_found():
    info = _by_name()["cpu"]
    assert info.loaded
    assert info.distribution == "pdc-cpu"
    assert info.hooks == ["pdc_register_backends"]
    assert info.backends == ["cpu"]


def test_third_party_backend_is_usable_and_broken_plugin_is_reported(third_party):
    plugins = _by_name()
    assert plugins["thirdparty"].loaded
    assert plugins["thirdparty"].version == "1.0"
    assert plugins["thirdparty"].backends == ["thirdparty"]
    assert "deliberately broken" in plugins["broken"].error
    assert plugins["broken"].backends == []

    backend = get_backend("thirdparty")
    assert backend.qualified_name == "thirdparty:0"
    buffer = pdc_core.UnifiedBuffer((3,), "int32", backend=backend)
    buffer.host[:] = [1, 2, 3]
    assert list(buffer.host_readonly()) == [1, 2, 3]
    # The third-party backend outranks cpu by priority, so it is the default now.
    assert pdc_core.available_backends()[0].name == "thirdparty"
    assert get_backend() is backend


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (HOOK_RAISES, "boom in the hook"),
        (RETURNS_GARBAGE, "returned [42]"),
        (REGISTERS_GARBAGE, "not a subclass of pdc_core.backend.Backend"),
    ],
)
def test_misbehaving_hooks_are_reported_and_skipped(install_plugins, source, expected):
    install_plugins("pdc-bad", {"bad": "pdc_bad"}, {"pdc_bad": source})
    info = _by_name()["bad"]
    assert expected in info.error
    assert info.backends == []
    assert get_backend("cpu").name == "cpu"  # the others keep working


def test_pdc_plugins_restricts_loading(third_party, monkeypatch):
    monkeypatch.setenv("PDC_PLUGINS", "cpu")
    pdc_core.reload_plugins()
    assert set(_by_name()) == {"cpu"}
    with pytest.raises(BackendUnavailable, match="unknown backend 'thirdparty'"):
        get_backend("thirdparty")


def test_pdc_backend_chooses_the_default(third_party, monkeypatch):
    monkeypatch.setenv("PDC_BACKEND", "cpu")
    assert get_backend().name == "cpu"


def test_unknown_backend_lists_installed_and_what_to_install():
    with pytest.raises(BackendUnavailable) as caught:
        get_backend("metalx")
    message = str(caught.value)
    assert "unknown backend 'metalx'" in message
    assert "cpu (pdc-cpu) - available" in message
    assert isinstance(caught.value, LookupError)


def test_known_but_missing_backend_names_the_distribution(monkeypatch):
    monkeypatch.setenv("PDC_PLUGINS", "cpu")
    pdc_core.reload_plugins()
    try:
        with pytest.raises(BackendUnavailable, match="pip install pdc-cuda"):
            get_backend("cuda")
    finally:
        monkeypatch.delenv("PDC_PLUGINS")
        pdc_core.reload_plugins()


def test_unavailable_backend_says_why(install_plugins, example_backend_importable):
    install_plugins("pdc-ghost", {"ghost": "pdc_ghost"}, {"pdc_ghost": UNAVAILABLE})
    with pytest.raises(BackendUnavailable, match="no ghost device attached"):
        get_backend("ghost")
    # An unavailable backend never wins the default, whatever its priority.
    assert get_backend().name != "ghost"


def test_device_index_out_of_range_lists_devices(example_backend):
    assert get_backend("example:1").device == 1
    with pytest.raises(BackendUnavailable) as caught:
        get_backend("example:7")
    assert "example:0 (simulated device 0), example:1 (simulated device 1)" in str(caught.value)


@pytest.mark.parametrize("name", ["", "cpu:x", "cpu:-1", 3])
def test_malformed_backend_names(name):
    with pytest.raises(BackendUnavailable):
        get_backend(name)


def test_duplicate_backend_name_is_reported(install_plugins, monkeypatch):
    source = """
from pdc_cpu import CpuBackend
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_backends(register):
    register(CpuBackend)
"""
    install_plugins("pdc-copycat", {"zz_copycat": "pdc_copycat"}, {"pdc_copycat": source})
    plugins = _by_name()
    # cpu is a first-party name: the copy is refused before any clash is considered.
    assert "'cpu' is reserved for the first-party pdc-cpu" in plugins["zz_copycat"].error
    assert plugins["cpu"].backends == ["cpu"]
    assert plugins["cpu"].error is None


def test_cli_plugins_and_info(third_party, capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "thirdparty  (pdc-thirdparty 1.0)" in out
    assert "error:    failed to load: ImportError: this plugin is deliberately broken" in out

    assert main(["plugins", "--json"]) == 0
    listed = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert listed["cpu"]["hooks"] == ["pdc_register_backends"]
    assert listed["broken"]["error"]

    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    backends = {entry["name"]: entry for entry in info["backends"]}
    assert backends["cpu"]["available"]
    assert backends["cpu"]["devices"][0]["name"] == "cpu:0"
    assert info["packages"]["numpy"]

    assert main(["info"]) == 0
    assert "cpu (pdc-cpu) - available" in capsys.readouterr().out


def test_cli_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["no-such-command"])
    assert caught.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_import_never_loads_plugins():
    import subprocess
    import sys

    code = "import pdc_core, pdc_core._plugins._loader as p; assert p._state is None; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr


# -- placements and pdc info sections (pdc_register_placements, pdc_register_info) --------

HERE = (
    HERE_PLACEMENT
    + """

def report():
    return {"status": "fine", "nested": {"ratio": 1.5, "count": 2}, "items": ["a", "b"]}


@hookimpl
def pdc_register_placements(register):
    register("here", open_here, "this process")


@hookimpl
def pdc_register_info(register):
    register("here", report, "Here and now")
"""
)

REPORT_RAISES = """
from pdc_core.backend import hookimpl

def report():
    raise RuntimeError("the cluster is on fire")

@hookimpl
def pdc_register_info(register):
    register("fire", report, "Fire")
"""

REPORT_NOT_A_MAPPING = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_info(register):
    register("odd", lambda: [1, 2], "Odd")
"""


@pytest.fixture
def here(install_plugins):
    install_plugins("pdc-here", {"here": "pdc_here"}, {"pdc_here": HERE})
    import pdc_here

    pdc_here.EVENTS.clear()
    return pdc_here


def test_plugins_register_placements_and_info_sections(here, capsys):
    info = _by_name()["here"]
    assert info.loaded
    assert info.hooks == ["pdc_register_info", "pdc_register_placements"]
    assert info.backends == []
    assert info.placements == ["here"]
    assert info.info_sections == ["here"]
    assert _by_name()["cpu"].placements == []  # a backend plugin registers none

    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "here  (pdc-here 1.0)\n  hooks:    pdc_register_info, pdc_register_placements" in out
    assert "  placements: here\n  info:     here\n" in out
    assert "cpu  (pdc-cpu" in out  # backends are listed as before
    assert "  backends: cpu" in out
    assert main(["plugins", "--json"]) == 0
    listed = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert listed["here"]["placements"] == ["here"]
    assert listed["cpu"]["backends"] == ["cpu"]

    assert main(["info", "--json"]) == 0
    section = json.loads(capsys.readouterr().out)["sections"]["here"]
    assert section["title"] == "Here and now"
    assert section["distribution"] == "pdc-here"
    assert section["report"]["nested"] == {"ratio": 1.5, "count": 2}
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "Here and now (from pdc-here 1.0):\n  status: fine\n" in out
    assert "  nested:\n    ratio: 1.5\n    count: 2\n  items: a, b\n" in out
    assert "cpu (pdc-cpu) - available" in out


@pytest.mark.parametrize(
    ("source", "expected"),
    [(REPORT_RAISES, "RuntimeError: the cluster is on fire"), (REPORT_NOT_A_MAPPING, "mapping")],
)
def test_a_failing_info_report_is_shown_and_contained(
    here, install_plugins, capsys, source, expected
):
    install_plugins("pdc-bad", {"bad": "pdc_bad"}, {"pdc_bad": source})
    assert main(["info", "--json"]) == 0
    sections = json.loads(capsys.readouterr().out)["sections"]
    (bad,) = (section for name, section in sections.items() if name in ("fire", "odd"))
    assert expected in bad["error"]
    assert "report" not in bad
    assert sections["here"]["report"]["status"] == "fine"  # the others still report
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"error: {bad['error']}" in out
    assert "status: fine" in out


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('raise RuntimeError("boom in placements")', "RuntimeError: boom in placements"),
        ("return 7", "pdc_register_placements returned 7"),
        ('register("Not A Name", lambda: None)', "placement name 'Not A Name' is invalid"),
        ('register("x", 42)', "placement 'x': 42 is not callable"),
        ("raise SystemExit(3)", "must not exit the process"),
    ],
)
def test_misbehaving_placement_hooks_are_reported_and_skipped(
    install_plugins, example_backend_importable, body, expected
):
    source = f"""
from pdc_example_backend import ExampleBackend
from pdc_core.backend import hookimpl

class OddBackend(ExampleBackend):
    name = "odd"
    distribution = "pdc-odd"

@hookimpl
def pdc_register_backends(register):
    register(OddBackend)

@hookimpl
def pdc_register_placements(register):
    {body}
"""
    install_plugins("pdc-odd", {"odd": "pdc_odd"}, {"pdc_odd": source})
    info = _by_name()["odd"]
    assert expected in info.error
    assert info.placements == []
    assert "x" not in pdc_core._plugins.registered_placements()
    assert info.backends == ["odd"]  # what its other hooks registered stays


def test_a_placement_name_is_kept_by_the_first_plugin(here, install_plugins):
    install_plugins("pdc-zz-here", {"zz_here": "pdc_zz_here"}, {"pdc_zz_here": HERE})
    plugins = _by_name()
    assert "registers placement 'here', which plugin 'here' (pdc-here) also registers" in (
        plugins["zz_here"].error
    )
    assert plugins["here"].placements == ["here"]
    registration = pdc_core._plugins.registered_placements()["here"]
    assert registration.plugin.name == "here"


def test_info_never_imports_ray_without_pdc_ray():
    import subprocess
    import sys

    code = (
        "import sys; from pdc_core._cli import main; assert main(['info']) == 0; "
        "assert main(['plugins']) == 0; assert 'ray' not in sys.modules, 'ray imported'"
    )
    env = {**__import__("os").environ, "PDC_PLUGINS": "cpu"}  # pdc-ray filtered out
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "Ray cluster" not in done.stdout
