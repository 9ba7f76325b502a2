"""A plugin may register a backend lazily (``LazyBackend``): pdc ranks and probes it with
what the registration gives and imports its class only when the class is needed."""

from __future__ import annotations

import sys

import pytest

import pdc_core
from pdc_core import BackendError, BackendUnavailable
from pdc_core._plugins import (
    available_backends,
    default_backend_name,
    list_plugins,
    registered_backends,
)

PLUGIN = """
from pdc_core.backend import Availability, LazyBackend, hookimpl

asked = []

def availability():
    asked.append("availability")
    return Availability.yes("simulated") if {available} else Availability.no("switched off")

@hookimpl
def pdc_register_backends(register):
    register(LazyBackend({name!r}, "pdc-example-backend", {target!r},
                         priority={priority}, availability=availability))
"""

CLASS = "pdc_example_backend:ExampleBackend"


@pytest.fixture
def lazy_plugin(install_plugins, example_backend_importable, monkeypatch):  # type: ignore[no-untyped-def]
    """Install pdc-example-backend's plugin as a lazy registration; return its module."""
    monkeypatch.delenv("PDC_BACKEND", raising=False)
    monkeypatch.delenv("PDC_PLUGINS", raising=False)
    # Whether the class is imported is the point: start with it out of sys.modules.
    monkeypatch.delitem(sys.modules, "pdc_example_backend", raising=False)

    def install(
        *, priority: int, available: bool = True, target: str = CLASS, name: str = "example"
    ) -> object:
        source = PLUGIN.format(name=name, target=target, priority=priority, available=available)
        install_plugins(
            "pdc-example-backend", {"example": "pdc_lazy_plugin"}, {"pdc_lazy_plugin": source}
        )
        pdc_core.reload_plugins()
        import pdc_lazy_plugin  # type: ignore[import-not-found]

        return pdc_lazy_plugin

    return install


def test_ranked_below_the_default_it_is_never_imported(lazy_plugin) -> None:  # type: ignore[no-untyped-def]
    lazy_plugin(priority=-50)
    assert pdc_core.get_backend().name == "cpu"
    assert "pdc_example_backend" not in sys.modules
    plugin = next(info for info in list_plugins() if info.name == "example")
    assert plugin.loaded
    assert plugin.backends == ["example"]
    assert "pdc_example_backend" not in sys.modules  # listing plugins imports nothing


def test_probed_without_importing_its_class(lazy_plugin) -> None:  # type: ignore[no-untyped-def]
    plugin = lazy_plugin(priority=500, available=False)
    assert pdc_core.get_backend().name == "cpu"
    assert plugin.asked == ["availability"]
    assert "pdc_example_backend" not in sys.modules
    with pytest.raises(
        BackendUnavailable, match=r"example backend .* not available here: switched off"
    ):
        pdc_core.get_backend("example")


def test_chosen_it_is_imported(lazy_plugin) -> None:  # type: ignore[no-untyped-def]
    plugin = lazy_plugin(priority=500)
    backend = pdc_core.get_backend()
    from pdc_example_backend import ExampleBackend

    assert type(backend) is ExampleBackend
    assert plugin.asked == ["availability"]  # probed once, through the registration
    assert registered_backends()["example"] is ExampleBackend


def test_listed_in_detail_it_is_imported(lazy_plugin) -> None:  # type: ignore[no-untyped-def]
    lazy_plugin(priority=-50)
    info = next(info for info in available_backends() if info.name == "example")
    from pdc_example_backend import ExampleBackend

    assert info.priority == -50
    assert info.availability.available
    assert info.capabilities == ExampleBackend.capabilities
    assert info.plugin == "example"


def test_a_class_that_fails_to_import_is_an_error_when_needed(lazy_plugin) -> None:  # type: ignore[no-untyped-def]
    lazy_plugin(priority=-50, target="pdc_no_such_module:Nothing")
    assert pdc_core.get_backend().name == "cpu"  # registering and ranking did not fail
    with pytest.raises(BackendError, match="failed to import its class") as caught:
        pdc_core.get_backend("example")
    message = str(caught.value)
    assert "(pdc_no_such_module:Nothing, registered by plugin 'example' of " in message
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    info = next(info for info in available_backends() if info.name == "example")
    assert not info.availability.available
    assert "No module named 'pdc_no_such_module'" in info.availability.reason


def test_a_class_that_does_not_match_its_registration_is_refused(lazy_plugin) -> None:  # type: ignore[no-untyped-def]
    lazy_plugin(priority=-50, name="simulated")
    with pytest.raises(BackendError, match="failed to import its class") as caught:
        pdc_core.get_backend("simulated")
    assert "has name 'example', but it was registered as LazyBackend(name='simulated')" in str(
        caught.value
    )


@pytest.mark.parametrize(
    ("priority", "problem"),
    [
        ("lambda: 1 / 0", "priority() raised ZeroDivisionError: division by zero"),
        ("lambda: 'high'", "priority() returned 'high' instead of an int"),
        ("lambda: None", "priority() returned None instead of an int"),
        ("lambda: True", "priority() returned True instead of an int"),
        ("lambda: 2.5", "priority() returned 2.5 instead of an int"),
        ("lambda: exit(0)", "priority() raised SystemExit: 0 (a plugin must not exit"),
    ],
)
def test_a_priority_that_fails_skips_only_its_backend(  # type: ignore[no-untyped-def]
    lazy_plugin, capsys, priority, problem
) -> None:
    from pdc_core._cli._main import main

    lazy_plugin(priority=priority)
    with pytest.warns(UserWarning, match=r"the example backend \(.*plugin 'example'.*skipped") as w:
        assert pdc_core.get_backend().name == "cpu"
    assert problem in str(w[0].message)
    info = next(info for info in available_backends() if info.name == "example")
    assert info.priority is None
    assert not info.availability.available
    assert problem in info.availability.reason
    assert next(info for info in available_backends() if info.name == "cpu").availability.available
    with pytest.raises(BackendUnavailable, match=r"example backend .* not available here"):
        pdc_core.get_backend("example")
    assert main(["info"]) == 0
    assert "cpu" in capsys.readouterr().out


def test_a_priority_function_may_return_a_numpy_integer(lazy_plugin) -> None:  # type: ignore[no-untyped-def]
    lazy_plugin(priority="lambda: __import__('numpy').int64(-50)")
    info = next(info for info in available_backends() if info.name == "example")
    assert info.priority == -50
    assert type(info.priority) is int
    assert info.availability.available


def test_a_first_ranked_class_that_fails_to_import_is_passed_over(lazy_plugin) -> None:  # type: ignore[no-untyped-def]
    lazy_plugin(priority=500, target="pdc_no_such_module:Nothing")
    with pytest.warns(UserWarning, match="next available backend is the default") as w:
        assert pdc_core.get_backend().name == "cpu"
    assert "registered by plugin 'example'" in str(w[0].message)
    assert "No module named 'pdc_no_such_module'" in str(w[0].message)
    assert default_backend_name() == "cpu"
    with pytest.raises(BackendError, match="failed to import its class") as caught:
        pdc_core.get_backend("example")
    assert not isinstance(caught.value, BackendUnavailable)
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


@pytest.mark.parametrize(
    ("target", "priority", "error"),
    [
        ("pdc_example_backend.ExampleBackend", "1", "it must be 'module:ClassName'"),
        (CLASS, "'high'", "has priority 'high': it must be an int or a function"),
    ],
)
def test_an_invalid_registration_is_reported_on_the_plugin(  # type: ignore[no-untyped-def]
    lazy_plugin, target, priority, error
) -> None:
    lazy_plugin(priority=priority, target=target)
    plugin = next(info for info in list_plugins() if info.name == "example")
    assert plugin.error is not None
    assert error in plugin.error
    assert plugin.backends == []


def test_lazy_exports_import_each_name_on_first_use(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    package = tmp_path / "pdc_lazy_package"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from pdc_core.backend import lazy_exports\n"
        "__getattr__ = lazy_exports(__name__, {'Thing': '._heavy'})\n"
    )
    (package / "_heavy.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("pdc_lazy_package", "pdc_lazy_package._heavy"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import pdc_lazy_package  # type: ignore[import-not-found]

    assert "pdc_lazy_package._heavy" not in sys.modules
    thing = pdc_lazy_package.Thing
    assert thing is sys.modules["pdc_lazy_package._heavy"].Thing
    assert vars(pdc_lazy_package)["Thing"] is thing  # later lookups skip __getattr__
    with pytest.raises(AttributeError, match="module 'pdc_lazy_package' has no attribute 'Nope'"):
        pdc_lazy_package.Nope  # noqa: B018
