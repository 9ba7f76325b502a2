from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import pdc_core

EXAMPLE_BACKEND_SRC = Path(__file__).parents[1] / "examples" / "pdc_example_backend" / "src"

InstallPlugins = Callable[..., Path]


@pytest.fixture
def install_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InstallPlugins]:
    """Install distributions with ``pdc`` entry points into a temporary site directory.

    ``install_plugins(dist_name, entry_points={"name": "module:attr"}, modules={"mod": src})``
    writes the modules and a ``.dist-info`` with the entry points, puts the directory
    first on ``sys.path`` and reloads pdc's plugins, exactly as ``pip install`` would
    make them visible. Everything is undone afterwards.
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    added_modules: list[str] = []

    def install(
        dist_name: str,
        entry_points: dict[str, str],
        modules: dict[str, str] | None = None,
        version: str = "1.0",
    ) -> Path:
        for module, source in (modules or {}).items():
            (site / f"{module}.py").write_text(textwrap.dedent(source))
            added_modules.append(module)
        dist_info = site / f"{dist_name.replace('-', '_')}-{version}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n"
        )
        lines = ["[pdc]"] + [f"{name} = {target}" for name, target in entry_points.items()]
        (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        pdc_core.reload_plugins()
        return site

    yield install
    for module in added_modules:
        sys.modules.pop(module, None)
    monkeypatch.undo()
    pdc_core.reload_plugins()


@pytest.fixture
def example_backend_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``pdc_example_backend`` (from ``examples/``) importable, as if installed."""
    monkeypatch.syspath_prepend(str(EXAMPLE_BACKEND_SRC))


@pytest.fixture
def example_backend(
    install_plugins: InstallPlugins, example_backend_importable: None
) -> pdc_core.Backend:
    """The example third-party backend from ``examples/`` (a simulated discrete device)."""
    install_plugins("pdc-example-backend", {"example": "pdc_example_backend"})
    return pdc_core.get_backend("example")
