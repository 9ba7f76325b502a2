"""Hook implementations that do not fit pdc's hooks fail loudly, for their plugin alone,
and the first-party names (cpu, cuda, metal, ray) stay with their distributions.

Regression tests for: a plugin defining ``pdc_register_backend`` (no ``s``) loading,
registering nothing and reporting no error; a hook implementation with the wrong
arguments failing with pluggy's multi-line message; a third-party distribution whose
entry point sorts before ``cpu`` registering a backend named ``cpu`` and replacing
pdc-cpu's (issue 26, item 4).
"""

from __future__ import annotations

import json

import pytest

from pdc_core import get_backend, list_plugins
from pdc_core._cli import main

THIRD_PARTY = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import hookimpl

class Working(ExampleBackend):
    name = "working"
    distribution = "pdc-working"
    priority = -10

@hookimpl
def pdc_register_backends(register):
    register(Working)
"""

TYPO = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import hookimpl

class Typo(ExampleBackend):
    name = "typo"
    distribution = "pdc-typo"
    priority = -10

@hookimpl
def pdc_register_backend(register):
    register(Typo)
"""

TYPO_BESIDE_A_GOOD_HOOK = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_backends(register):
    raise AssertionError("a plugin with an invalid hook must not run any hook")

@hookimpl
def pdc_register_plcements(register):
    pass
"""

NOTHING_NEAR = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_make_coffee(register):
    pass
"""

WRONG_ARGUMENT = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_backends(registry):
    raise AssertionError("never called")
"""

NO_ARGUMENT = """
from pdc_core.backend import hookimpl

@hookimpl
def pdc_register_info():
    raise AssertionError("never called")
"""

UNMARKED = """
def pdc_register_backends(register):
    raise AssertionError("never called")
"""

OPTIONAL_HOOK_OF_ANOTHER_PLUGIN = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import hookimpl

class Optional(ExampleBackend):
    name = "optional"
    distribution = "pdc-optional"
    priority = -10

@hookimpl(optionalhook=True)
def pdc_other_plugins_hook(register):
    pass

@hookimpl
def pdc_register_backends(register):
    register(Optional)
"""


def _plugin(name: str):
    (info,) = [info for info in list_plugins() if info.name == name]
    return info


def _install(install_plugins, name: str, source: str) -> None:
    install_plugins(f"pdc-{name}", {name: f"pdc_{name}"}, {f"pdc_{name}": source})


@pytest.fixture
def working(install_plugins, example_backend_importable) -> None:
    _install(install_plugins, "working", THIRD_PARTY)


def test_a_misspelled_hook_is_an_error_of_that_plugin_alone(working, install_plugins, capsys):
    _install(install_plugins, "typo", TYPO)
    error = _plugin("typo").error
    assert error == (
        "invalid hook implementation: pdc_register_backend matches no pdc hook (did you "
        "mean pdc_register_backends? pdc's hooks are pdc_register_backends, "
        "pdc_register_benchmarks, pdc_register_info, pdc_register_placements); the plugin "
        "is not loaded"
    )
    assert not _plugin("typo").loaded
    assert _plugin("typo").hooks == []
    # The others keep working.
    assert get_backend("working").name == "working"
    assert get_backend("cpu").name == "cpu"
    assert _plugin("working").loaded

    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert f"typo  (pdc-typo 1.0)\n  hooks:    -\n  backends: -\n  error:    {error}\n" in out
    assert main(["plugins", "--json"]) == 0
    listed = {plugin["name"]: plugin for plugin in json.loads(capsys.readouterr().out)}
    assert listed["typo"]["error"] == error
    assert listed["working"]["error"] is None
    assert listed["working"]["backends"] == ["working"]


def test_a_plugin_with_one_invalid_hook_runs_none_of_its_hooks(install_plugins):
    _install(install_plugins, "mixed", TYPO_BESIDE_A_GOOD_HOOK)
    error = _plugin("mixed").error
    assert error is not None
    assert "pdc_register_plcements matches no pdc hook (did you mean pdc_register_placements?" in (
        error
    )
    assert "AssertionError" not in error
    assert get_backend("cpu").name == "cpu"


def test_a_hook_name_far_from_every_hook_lists_them_without_a_guess(install_plugins):
    _install(install_plugins, "coffee", NOTHING_NEAR)
    error = _plugin("coffee").error
    assert error is not None
    assert "pdc_make_coffee matches no pdc hook (pdc's hooks are pdc_register_backends" in error
    assert "did you mean" not in error


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            WRONG_ARGUMENT,
            "invalid hook implementation: pdc_register_backends(registry) does not match the "
            "hook pdc_register_backends(register): pdc calls it with the one argument "
            "'register'; the plugin is not loaded",
        ),
        (
            NO_ARGUMENT,
            "invalid hook implementation: pdc_register_info() does not match the hook "
            "pdc_register_info(register): pdc calls it with the one argument 'register'; "
            "the plugin is not loaded",
        ),
        (
            UNMARKED,
            "invalid hook implementation: pdc_register_backends is not marked with @hookimpl "
            "(from pdc_core.backend import hookimpl), so pdc would never call it; the plugin "
            "is not loaded",
        ),
    ],
    ids=["unknown-argument", "no-argument", "unmarked"],
)
def test_a_hook_with_wrong_arguments_is_a_precise_error(
    working, install_plugins, capsys, source, expected
):
    _install(install_plugins, "wrongargs", source)
    assert _plugin("wrongargs").error == expected
    assert "\n" not in expected
    assert get_backend("working").name == "working"
    assert main(["plugins", "--json"]) == 0
    listed = {plugin["name"]: plugin for plugin in json.loads(capsys.readouterr().out)}
    assert listed["wrongargs"]["error"] == expected
    assert listed["working"]["error"] is None


def test_an_optional_hook_of_another_plugin_is_allowed(install_plugins, example_backend_importable):
    _install(install_plugins, "optional", OPTIONAL_HOOK_OF_ANOTHER_PLUGIN)
    assert _plugin("optional").error is None
    assert get_backend("optional").name == "optional"


def test_the_first_party_plugins_pass_validation():
    errors = {info.name: info.error for info in list_plugins() if info.distribution}
    assert errors.get("cpu", "missing") is None


# -- first-party names (issue 26, item 4) -----------------------------------------------

SQUATTER = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import hookimpl

class Squatter(ExampleBackend):
    name = "{name}"
    distribution = "{claimed}"
    priority = 1000

class Honest(ExampleBackend):
    name = "squatters_own"
    distribution = "pdc-squatter"
    priority = -10

@hookimpl
def pdc_register_backends(register):
    register(Squatter)
    register(Honest)
"""


@pytest.mark.parametrize("entry_point", ["aaa", "zzz"])
@pytest.mark.parametrize("claimed", ["pdc-squatter", "pdc-cpu"])
def test_a_third_party_plugin_cannot_take_the_cpu_backend_name(
    install_plugins, example_backend_importable, capsys, entry_point, claimed
):
    """Whatever order the entry points load in, and whatever the class claims."""
    install_plugins(
        "pdc-squatter",
        {entry_point: "pdc_squatter"},
        {"pdc_squatter": SQUATTER.format(name="cpu", claimed=claimed)},
    )
    assert type(get_backend("cpu")).__module__.startswith("pdc_cpu")
    assert get_backend().name != "cpu" or type(get_backend()).__module__.startswith("pdc_cpu")
    cpu = _plugin("cpu")
    assert cpu.loaded
    assert cpu.backends == ["cpu"]
    squatter = _plugin(entry_point)
    expected = (
        "refused backend 'cpu': pdc-squatter registers it, but 'cpu' is reserved for the "
        "first-party pdc-cpu; a third-party backend needs a name of its own"
    )
    assert squatter.error == expected
    # Its other backend stays.
    assert squatter.backends == ["squatters_own"]
    assert get_backend("squatters_own").name == "squatters_own"

    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert f"{entry_point}  (pdc-squatter 1.0)" in out
    assert f"error:    {expected}" in out
    assert main(["plugins", "--json"]) == 0
    listed = {plugin["name"]: plugin for plugin in json.loads(capsys.readouterr().out)}
    assert listed[entry_point]["distribution"] == "pdc-squatter"
    assert listed[entry_point]["error"] == expected
    assert listed["cpu"]["error"] is None


@pytest.mark.parametrize("name", ["cuda", "metal", "ray"])
def test_every_first_party_name_is_reserved(install_plugins, example_backend_importable, name):
    install_plugins(
        "pdc-squatter",
        {"aaa": "pdc_squatter"},
        {"pdc_squatter": SQUATTER.format(name=name, claimed=f"pdc-{name}")},
    )
    error = _plugin("aaa").error
    assert error is not None
    assert error.startswith(f"refused backend {name!r}: pdc-squatter registers it")
    assert f"reserved for the first-party pdc-{name}" in error
    from pdc_core._plugins import registered_backends

    registered = registered_backends().get(name)
    assert registered is None or registered.__module__.startswith(f"pdc_{name}")


PLACEMENT_SQUATTER = """
import contextlib
from pdc_core.backend import hookimpl

@contextlib.asynccontextmanager
async def open_placement():
    yield None

@hookimpl
def pdc_register_placements(register):
    register("ray", open_placement, "not Ray at all")

@hookimpl
def pdc_register_info(register):
    register("ray", lambda: {}, "not Ray at all")
"""


def test_a_third_party_plugin_cannot_take_the_ray_placement(install_plugins):
    from pdc_core._plugins import registered_info_sections, registered_placements

    install_plugins("pdc-fakeray", {"aaa": "pdc_fakeray"}, {"pdc_fakeray": PLACEMENT_SQUATTER})
    error = _plugin("aaa").error
    assert error is not None
    assert "refused placement 'ray': pdc-fakeray registers it" in error
    assert "refused info section 'ray': pdc-fakeray registers it" in error
    placement = registered_placements().get("ray")
    section = registered_info_sections().get("ray")
    for registration in (placement, section):
        assert registration is None or registration.plugin.distribution == "pdc-ray"


CLAIMANT = """
from pdc_example_backend import ExampleBackend
from pdc_core.backend import hookimpl

class Claimant(ExampleBackend):
    name = "shared"
    distribution = "{dist}"
    priority = -10

@hookimpl
def pdc_register_backends(register):
    register(Claimant)
"""


def test_two_third_party_claimants_keep_the_documented_rule(
    install_plugins, example_backend_importable
):
    """A name nobody reserves goes to the plugin whose distribution the class names."""
    install_plugins("pdc-first", {"aaa": "pdc_first"}, {"pdc_first": CLAIMANT.format(dist="x")})
    install_plugins(
        "pdc-second", {"bbb": "pdc_second"}, {"pdc_second": CLAIMANT.format(dist="pdc-second")}
    )
    assert get_backend("shared").distribution == "pdc-second"
    assert _plugin("aaa").error == (
        "registers backend 'shared', which plugin 'bbb' (pdc-second) also registers; skipped"
    )
    assert _plugin("bbb").error is None
