"""Sphinx extension: ``.. pdc-face:: MODULE`` documents one public face of pdc.

The entries come from the face's ``__all__`` when the site is built, grouped by the
comments in ``__all__`` (``# the contract``): each name documented here is an
autodoc entry (classes and functions with their docstrings through napoleon,
constants with their ``#:`` comments); a name documented on another face's page is
a link to it. So a new public name appears in the reference without editing it, and
``tests/docs/test_docstrings.py`` checks that it has something to say.

It also resolves references to the private path of a public object
(``pdc_cuda._graphs.GraphOps`` in an annotation) to its public entry.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any, Generic, ParamSpec, TypeVar, TypeVarTuple

import pdc_faces
from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.ext import intersphinx
from sphinx.ext.autodoc.mock import mock
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

_ROLES = {
    "class": "class",
    "function": "func",
    "callable": "func",
    "data": "data",
    "module": "mod",
}


def _role(entry: pdc_faces.Entry) -> str:
    if entry.kind == "class" and issubclass(entry.obj, BaseException):  # type: ignore[arg-type]
        return "exc"
    return _ROLES[entry.kind]


def _plain_signature(obj: Any) -> str:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return "()"
    empty = inspect.Parameter.empty
    return str(
        signature.replace(
            parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
            return_annotation=empty,
        )
    )


def _value(obj: object) -> str | None:
    if isinstance(obj, bool | int | float | str) and not isinstance(obj, enum.Enum):
        return repr(obj)
    if isinstance(obj, tuple) and all(isinstance(item, int) for item in obj):
        return repr(obj)
    return None


def _indent(text: str) -> list[str]:
    return ["   " + line if line else "" for line in inspect.cleandoc(text).splitlines()]


def face_rst(face: str) -> list[str]:
    """The reStructuredText of a face's reference."""
    by_name = {entry.name: entry for entry in pdc_faces.entries(face)}
    lines = [f".. automodule:: {face}", "   :no-members:", ""]
    for title, names in pdc_faces.sections(face):
        if title:
            heading = title[0].upper() + title[1:]
            lines += [heading, "-" * len(heading), ""]
        elsewhere: list[pdc_faces.Entry] = []
        for name in names:
            entry = by_name[name]
            if entry.home != face:
                elsewhere.append(entry)
                continue
            lines += _entry_rst(entry)
        if elsewhere:
            lines.append(".. rubric:: Also exported here")
            lines.append("")
            for entry in elsewhere:
                lines.append(
                    f"* :{_role(entry)}:`{entry.name} <{entry.target}>`"
                    f" (documented in :mod:`{entry.home}`)"
                )
            lines.append("")
    return lines


def _entry_rst(entry: pdc_faces.Entry) -> list[str]:
    qualified = entry.qualified
    if entry.kind == "class":
        directive = "autoexception" if _role(entry) == "exc" else "autoclass"
        options = ["   :members:", "   :undoc-members:", "   :show-inheritance:"]
        stop = _mixins_end(entry.obj)
        if stop is not None:
            options.append(f"   :inherited-members: {stop}")
        return [f".. {directive}:: {qualified}", *options, ""]
    if entry.kind == "function":
        return [f".. autofunction:: {qualified}", ""]
    doc = pdc_faces.docstring(entry) or ""
    if entry.kind == "callable":
        head = [f".. py:function:: {qualified}{_plain_signature(entry.obj)}"]
    else:
        head = [f".. py:data:: {qualified}"]
        value = _value(entry.obj)
        if value is not None:
            head.append(f"   :value: {value}")
    return [*head, "", *_indent(doc), ""]


class FaceDirective(SphinxDirective):
    """``.. pdc-face:: pdc_core.backend``: the whole reference of one face."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        face = self.arguments[0]
        with mock(self.config.autodoc_mock_imports):
            lines = face_rst(face)
        node = nodes.section()
        node.document = self.state.document
        content = StringList(lines, source=f"<pdc-face {face}>")
        nested_parse_with_titles(self.state, content, node)
        return node.children


def _mixins_end(cls: Any) -> str | None:
    """For a class split by role into private mixins (``pdc_ray.RemoteRunner`` over
    ``pdc_ray._runner_caller.CallerSide``, ...): the name of its first base that is
    not one of them, where its documented inherited members stop; ``None`` for a class
    whose next base is public (its members are documented there).

    A private mixin (a class of pdc's private modules that no face exports) has no page
    of its own, so its members are documented on the public class that combines them.
    """
    public = _public_class_ids()
    mixins = 0
    for base in cls.__mro__[1:]:
        module = getattr(base, "__module__", "")
        private = any(part.startswith("_") for part in module.split("."))
        if module.startswith(pdc_faces.PACKAGES) and private and id(base) not in public:
            mixins += 1
            continue
        return base.__name__ if mixins else None
    return None


@functools.cache
def _public_class_ids() -> frozenset[int]:
    """The identities of the classes the faces export."""
    return frozenset(
        id(entry.obj)
        for face in pdc_faces.FACES
        for entry in pdc_faces.entries(face)
        if entry.kind == "class"
    )


def _public_targets() -> tuple[dict[int, str], dict[str, str]]:
    """Where each public class and function is documented: by identity, and by the
    name of a re-export on another face (``pdc_cuda.LaunchConfig``)."""
    by_id: dict[int, str] = {}
    by_name: dict[str, str] = {}
    for face in pdc_faces.FACES:
        for entry in pdc_faces.entries(face):
            if entry.kind in ("class", "function") and entry.home == face:
                by_id.setdefault(id(entry.obj), entry.target)
            if entry.home != face:
                by_name.setdefault(entry.qualified, entry.target)
    return by_id, by_name


def _lookup(path: str) -> tuple[bool, object]:
    """Import the longest module prefix of a dotted path and walk the rest."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except AttributeError:
            return False, None
        return True, obj
    return False, None


def _public_name(config: Any, target: str) -> str | None:
    by_id, by_name = config._pdc_targets
    if target in by_name:
        return by_name[target]
    found, obj = _lookup(target)
    if found and id(obj) in by_id:
        return by_id[id(obj)]
    head, _, member = target.rpartition(".")
    if head:
        found, owner = _lookup(head)
        if found and id(owner) in by_id:
            return f"{by_id[id(owner)]}.{member}"
    return None


def _type_variable_names() -> set[str]:
    """Names of the type variables of pdc's modules (``M``, ``ReqT``): no page of their own."""
    names: set[str] = set()
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(pdc_faces.PACKAGES):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, TypeVar | ParamSpec | TypeVarTuple):
                names.add(attr)
                names.add(f"{name}.{attr}")
    return names


def _private_names() -> set[str]:
    """Module-level names of pdc's private modules (``CpuStream`` in ``pdc_cpu._streams``,
    ``RecordBatch``), bare and in full, read from the sources (the modules are not
    imported: some import a vendor library)."""
    names: set[str] = set()
    for package in pdc_faces.PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        for root in spec.submodule_search_locations:
            for path in Path(root).rglob("*.py"):
                parts = [package, *path.relative_to(root).with_suffix("").parts]
                if parts[-1] == "__init__":
                    parts.pop()
                if not any(part.startswith("_") for part in parts):
                    continue
                module = ".".join(parts)
                names.add(module)
                for node in ast.parse(path.read_text(encoding="utf-8")).body:
                    for name in _defined(node):
                        names.add(name)
                        names.add(f"{module}.{name}")
    return names


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _by_suffix(env: Any, node: Any, target: str) -> str | None:
    """The one pdc object whose documented name ends with ``target``, preferring the
    class the reference is written in (``:meth:`synchronize``` in ``Stream``)."""
    domain = env.get_domain("py")
    suffix = "." + target
    candidates = [
        name
        for name in domain.objects
        if name.startswith(pdc_faces.FACES) and name.endswith(suffix)
    ]
    context = ".".join(part for part in (node.get("py:module"), node.get("py:class")) if part)
    if context:
        inside = [name for name in candidates if name == f"{context}{suffix}"]
        if inside:
            return inside[0]
        # a member the class inherits: documented on the base that defines it
        found, owner = _lookup(context)
        by_id = env.app.config._pdc_targets[0]
        for base in getattr(owner, "__mro__", ()) if found else ():
            public = by_id.get(id(base))
            if public is not None and f"{public}{suffix}" in domain.objects:
                return f"{public}{suffix}"
    return candidates[0] if len(candidates) == 1 else None


def _resolve_private(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve what plain Sphinx cannot, for pdc's own names only.

    - a private path of a public object (``pdc_cuda._graphs.GraphOps``, written by an
      annotation) resolves to its public entry;
    - a short name (``Backend``, ``Stream.synchronize``) that one pdc object ends with
      resolves to it, as a reader would;
    - a type variable (``M``, ``ReqT``) or a private object (``CpuStream``, the
      return type of ``CpuBackend.create_stream``) is shown as plain text: it has no
      page. Anything else that resolves nowhere stays a warning, so a misspelled name
      fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "").lstrip("~.")
    if target in app.config._pdc_typevars:  # type: ignore[attr-defined]
        return contnode
    if not _DOTTED.fullmatch(target):
        # a type expression the signature parser left whole ("T | Control", a base
        # class given as a string): not a name, so nothing to link
        return contnode
    third_party = _third_party(app, env, node, contnode, target)
    if third_party is not None:
        return third_party
    public: str | None = None
    if target.startswith(pdc_faces.PACKAGES):
        public = _public_name(app.config, target)
    if public is None:
        public = _by_suffix(env, node, target)
    if public is None and (
        target in app.config._pdc_private  # type: ignore[attr-defined]
        or (target.startswith("_") and "." not in target)
        or _private_module_target(target)
    ):
        # A private object (a helper type in a signature, a private module named in
        # a docstring) has no page: it is shown as text. A name that exists nowhere
        # still fails the build.
        return contnode
    if public is None and node.get("reftype") == "attr" and _instance_attribute(env, node, target):
        return contnode
    if public is None or public == target:
        return None
    domain = env.get_domain("py")
    for role in ("class", "exc", "func", "meth", "attr", "data", "obj", "mod"):
        resolved = domain.resolve_xref(
            env, node["refdoc"], app.builder, role, public, node, contnode
        )
        if resolved is not None:
            return resolved
    return None


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Module aliases that annotations use (``np.dtype`` where NumPy's import stayed under
# TYPE_CHECKING and the annotation was left as a string).
_ALIASES = {"np": "numpy", "npt": "numpy.typing"}


def _third_party(app: Sphinx, env: Any, node: Any, contnode: Any, target: str) -> Any:
    """Intersphinx once more, for an aliased module (``npt.NDArray``) or a role that
    does not match the inventory (``types.FunctionType`` is data there, a class in
    a signature)."""
    head, _, rest = target.partition(".")
    candidates = [target]
    if head in _ALIASES and rest:
        candidates.insert(0, f"{_ALIASES[head]}.{rest}")
    parts = target.split(".")
    if any(part.startswith("_") for part in parts[:-1]):
        # concurrent.futures._base.Future is documented as concurrent.futures.Future
        candidates.append(".".join([*(p for p in parts[:-1] if not p.startswith("_")), parts[-1]]))
    for candidate in candidates:
        if candidate.startswith(pdc_faces.PACKAGES):
            continue
        for reftype in (node.get("reftype"), "obj"):
            retry = node.copy()
            retry["reftarget"] = candidate
            retry["reftype"] = reftype
            resolved = intersphinx.missing_reference(app, env, retry, contnode)
            if resolved is not None:
                return resolved
    return None


def _private_module_target(target: str) -> bool:
    parts = target.split(".")
    if not target.startswith(pdc_faces.PACKAGES) or not any(p.startswith("_") for p in parts):
        return False
    try:
        if importlib.util.find_spec(target) is not None:
            return True
    except (ImportError, ValueError):
        pass
    return _lookup(target)[0]


def _instance_attribute(env: Any, node: Any, target: str) -> bool:
    """Whether ``target`` (``stop_timeout``, ``PersistentPipeline.kernel``) is an
    attribute that instances of a pdc class set in their code (``self.stop_timeout =``).

    autodoc gives such attributes no entry of their own on a class re-exported from
    a private module, so a reference to one is shown as text."""
    owner_name, _, attribute = target.rpartition(".")
    if owner_name:
        owner = _by_suffix(env, node, owner_name) or owner_name
    else:
        owner = ".".join(p for p in (node.get("py:module"), node.get("py:class")) if p)
    found, cls = _lookup(owner)
    if not found or not isinstance(cls, type):
        return False
    pattern = re.compile(rf"\bself\.{re.escape(attribute)}\s*(:[^=]*)?=")
    for base in cls.__mro__:
        module = sys.modules.get(_defining_module(base) or "")
        path = getattr(module, "__file__", None)
        if path and pattern.search(Path(path).read_text(encoding="utf-8")):
            return True
    return False


def _defining_module(obj: Any) -> str | None:
    """The module whose source defines a published class (its ``__module__`` names the
    public face instead), found from its functions' code."""
    if not isinstance(obj, type):
        return None
    for member in vars(obj).values():
        for function in (getattr(member, "__func__", member), getattr(member, "fget", None)):
            code = getattr(function, "__code__", None)
            if code is None:
                continue
            for name, module in list(sys.modules.items()):
                if getattr(module, "__file__", None) == code.co_filename:
                    return name
    return None


def _patch_real_modname() -> None:
    """Let autodoc read a published class's ``#:`` attribute comments from the source
    that defines it, not from the face that re-exports it."""
    from sphinx.ext.autodoc import AttributeDocumenter, ClassDocumenter

    for documenter in (ClassDocumenter, AttributeDocumenter):
        original = documenter.get_real_modname

        def get_real_modname(self: Any, _original: Any = original) -> str:
            owner = self.object if isinstance(self.object, type) else self.parent
            return _defining_module(owner) or _original(self)

        documenter.get_real_modname = get_real_modname  # type: ignore[method-assign]


class _RepositoryLinks(SphinxPostTransform):
    """A guide's link to a file of the repository outside docs/ (``../README.md``,
    ``../examples/x.py``) works on GitHub; the site has no page for it, so it is shown
    as its text, in code style, instead of a broken link."""

    default_priority = 5  # before MyST resolves its references

    def run(self, **kwargs: Any) -> None:
        docs = Path(self.env.srcdir)
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("refdomain") not in (None, "", "myst", "doc", "std"):
                continue
            target = str(node.get("reftarget", "")).split("#")[0]
            if not target:
                continue
            base = docs / Path(self.env.docname).parent
            paths = [base / target, base / f"{target}.md", Path(target), Path(f"{target}.md")]
            outside = [
                path.resolve() for path in paths if path.is_absolute() or target.startswith("../")
            ]
            if any(p.exists() and docs.resolve() not in p.parents for p in outside):
                node.replace_self(nodes.literal("", node.astext() or target))


# napoleon reads the first line of an attribute's or property's docstring as
# "type: description" when it has a colon; pdc's are prose ("The failure: ..."), so
# napoleon is kept off them: their lines are saved before it runs and put back after.
_PROSE = ("property", "attribute", "data")


def _save_prose(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    if what in _PROSE:
        app.env.temp_data.setdefault("pdc_prose", {})[(what, name)] = list(lines)


def _restore_prose(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    saved = app.env.temp_data.get("pdc_prose", {}).pop((what, name), None)
    if saved is not None:
        lines[:] = saved


def _collect_targets(app: Sphinx, config: Any) -> None:
    with mock(config.autodoc_mock_imports):
        config._pdc_targets = _public_targets()
        config._pdc_typevars = _type_variable_names()
        config._pdc_private = _private_names()


def _drop_object_base(app: Sphinx, name: str, obj: Any, options: Any, bases: list[Any]) -> None:
    """A "Bases: object" line says nothing: a class whose only base is ``object`` shows
    none."""
    if bases == [object]:
        bases.clear()
        return
    floors = _private_floors(obj)
    if floors:
        # A class built of private floors (pdc_core.Mailbox: its state, policy, anyio
        # stream and lane) shows the public bases they stand on, not the floors.
        bases[:] = [
            base
            for cls in (obj, *floors)
            for base in getattr(cls, "__orig_bases__", cls.__bases__)
            if getattr(base, "__origin__", base) not in (*floors, Generic)
        ]


def _private_floors(cls: object) -> tuple[type, ...]:
    """The bases of a pdc class that live in private modules and that no face
    publishes: the private floors (mixins) it is built of; empty for most classes."""
    if not isinstance(cls, type):
        return ()
    published = {id(obj) for obj in _published_classes()}
    return tuple(
        base
        for base in cls.__mro__[1:]
        if base.__module__.startswith(pdc_faces.PACKAGES)
        and any(part.startswith("_") for part in base.__module__.split("."))
        and id(base) not in published
    )


@functools.cache
def _published_classes() -> tuple[object, ...]:
    return tuple(
        entry.obj
        for face in pdc_faces.FACES
        for entry in pdc_faces.entries(face)
        if entry.kind == "class"
    )


def _skip_third_party_inherited(
    app: Sphinx, what: str, name: str, obj: Any, skip: bool, options: Any
) -> bool | None:
    """A class documented with ``:inherited-members:`` (one built of private floors:
    their members are its own) lists no member that code outside pdc defines: autodoc
    would otherwise add what its public base's third-party bases define (anyio's
    ``TypedAttributeProvider.extra`` under ``pdc_core.Mailbox``)."""
    if not _option(options, "inherited_members"):
        return None
    function = getattr(obj, "fget", None) or getattr(obj, "__func__", obj)
    module = getattr(function, "__module__", None)
    if not isinstance(module, str) or module.startswith(pdc_faces.PACKAGES):
        return None
    return True


def _option(options: Any, name: str) -> Any:
    if isinstance(options, dict):
        return options.get(name)
    return getattr(options, name, None)


@functools.cache
def _alias_table() -> list[tuple[str, str]]:
    """(expanded text, name) of the type aliases signatures show by name: NumPy's
    ``DTypeLike`` and ``ArrayLike`` (which expand into NumPy's private typing protocols)
    and pdc's ``RecordLike``. Longest first, so no alias is cut inside another."""
    import numpy.typing as npt
    from sphinx.util.typing import stringify_annotation

    from pdc_core._persistent._session import RecordLike

    aliases = {
        "~numpy.typing.DTypeLike": npt.DTypeLike,
        "~numpy.typing.ArrayLike": npt.ArrayLike,
        "~pdc_core._persistent._session.RecordLike": RecordLike,
    }
    table = [
        (stringify_annotation(alias, mode), name)  # type: ignore[arg-type]
        for name, alias in aliases.items()
        for mode in ("smart", "fully-qualified-except-typing")
    ]
    return sorted(table, key=lambda pair: -len(pair[0]))


def _name_aliases(
    app: Sphinx,
    what: str,
    name: str,
    obj: Any,
    options: Any,
    signature: str | None,
    return_annotation: str | None,
) -> tuple[str | None, str | None]:
    """Show a type alias in a signature by its name, not as the union it stands for
    (``request_dtype: DTypeLike``, not a line of NumPy's private protocols)."""
    for expanded, alias in _alias_table():
        if signature:
            signature = signature.replace(expanded, alias)
        if return_annotation:
            return_annotation = return_annotation.replace(expanded, alias)
    return signature, return_annotation


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("pdc-face", FaceDirective)
    app.connect("autodoc-process-signature", _name_aliases)
    app.add_post_transform(_RepositoryLinks)
    app.connect("autodoc-process-bases", _drop_object_base)
    app.connect("autodoc-skip-member", _skip_third_party_inherited)
    _patch_real_modname()
    app.connect("config-inited", _collect_targets)
    app.connect("missing-reference", _resolve_private)
    app.connect("autodoc-process-docstring", _save_prose, priority=100)
    app.connect("autodoc-process-docstring", _restore_prose, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
