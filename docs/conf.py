"""Sphinx configuration of pdc's documentation site.

Build it with ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` after
``pip install -e '.[docs]'`` (README.md, "Documentation"). The build uses no network:
intersphinx reads the inventories under ``docs/_inventories/`` (see its README.md).
"""

from __future__ import annotations

import importlib.util
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))

project = "pdc"
author = "pdc developers"
copyright = "pdc developers"

from pdc_core import __version__ as release  # noqa: E402

version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "pdc_api",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_inventories", "_ext", "Thumbs.db", ".DS_Store"]
language = "en"

# -- Markdown (the guides stay Markdown) ---------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4
# The guides link to files of the repository (../examples/..., ../README.md): those
# links stay plain links instead of being treated as documents.
suppress_warnings: list[str] = []

# -- autodoc ----------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = False
autodoc_inherit_docstrings = True
autodoc_default_options: dict[str, object] = {}
python_use_unqualified_type_names = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# The vendor libraries of the plugins are imported lazily by pdc; where one is not
# installed, autodoc stands in a mock for it, so the site builds without them.
autodoc_mock_imports = [
    name
    for name in ("cupy", "cupyx", "mlx", "ray", "numba")
    if importlib.util.find_spec(name) is None
]

# -- cross-references -------------------------------------------------------------
nitpicky = True
# Nothing is ignored: NumPy's typing aliases (DTypeLike, ArrayLike), which would
# expand into NumPy's private protocols, are shown by name (pdc_api._name_aliases), so
# a signature that still spells out a private type fails the build.
nitpick_ignore_regex: list[tuple[str, str]] = []


def _compile_inventory(name: str) -> str:
    """Compile docs/_inventories/NAME.txt (one ``name domain:role prio uri dispname``
    a line) into a Sphinx objects.inv under _build, and return its path."""
    text = (HERE / "_inventories" / f"{name}.txt").read_text(encoding="utf-8")
    body = "".join(
        line + "\n" for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {name}\n"
        "# Version: \n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    out = HERE / "_build" / "inventories" / f"{name}.inv"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(header.encode() + zlib.compress(body.encode("utf-8")))
    return str(out)


# Offline on purpose: CI has no network guaranteed, and a build that fetched
# inventories would pass or fail with the network. Python's inventory is the one
# Debian's python3.11-doc ships; the others are written out by hand for the names
# pdc's API refers to (docs/_inventories/README.md).
intersphinx_mapping = {
    "python": ("https://docs.python.org/3/", str(HERE / "_inventories" / "python.inv")),
    "numpy": ("https://numpy.org/doc/stable/", _compile_inventory("numpy")),
    "anyio": ("https://anyio.readthedocs.io/en/stable/", _compile_inventory("anyio")),
    "trio": ("https://trio.readthedocs.io/en/stable/", _compile_inventory("trio")),
    "cupy": ("https://docs.cupy.dev/en/stable/", _compile_inventory("cupy")),
    "pytest": ("https://docs.pytest.org/en/stable/", _compile_inventory("pytest")),
}
intersphinx_timeout = 1

# -- HTML -------------------------------------------------------------------------
html_theme = "furo"
html_title = f"pdc {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
