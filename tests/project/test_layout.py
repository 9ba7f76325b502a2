"""The layout holds: no import cycle in pdc_core or any plugin, the plugins' modules are
layered one way, and extenders use public faces only.

The import graph of a package is built from its source: every ``import`` and ``from ...
import`` of one of its modules, at any depth (function-level ones included), and those
under ``if TYPE_CHECKING:`` too -- a type-only import is an arrow like any other: it
says which module knows which. Importing a package runs its ``__init__``, so an import
of ``pdc_core.a.b`` is an edge to ``pdc_core.a`` and to ``pdc_core.a.b``; a module's
import of its own package by name (``import pdc_core.a`` inside ``pdc_core.a.b``) is an
edge too, since the package's ``__init__`` imports the module.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import pdc_core

SRC = Path(pdc_core.__file__).parent
ROOT = Path(__file__).parents[2]


def _imports(
    tree: ast.AST, module: str, is_package: bool, modules: frozenset[str] = frozenset()
) -> list[str]:
    """Absolute names of the modules ``module`` imports (TYPE_CHECKING blocks included).

    ``from pkg import name`` imports ``pkg`` itself unless every name is a submodule of
    it (one of ``modules``): ``from . import _sibling`` reads no name of the package.
    """
    found: list[str] = []
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = [f"{target}.{alias.name}" for alias in node.names]
            if not all(name in modules for name in submodules):
                found.append(target)
            found.extend(submodules)  # `from pkg import submodule`
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph(src: Path = SRC) -> dict[str, set[str]]:
    """The import graph of the package at ``src`` (pdc_core by default)."""
    root = src.parent

    def name_of(path: Path) -> str:
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    modules = {name_of(path): path for path in src.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        found = _imports(tree, name, path.name == "__init__.py", frozenset(modules))
        for target in found:
            parts = target.split(".")
            for depth in range(1, len(parts) + 1):
                prefix = ".".join(parts[:depth])
                # A module's own ancestors are already being imported when it runs:
                # importing pdc_core.x.y runs pdc_core and pdc_core.x first, so the
                # packages on the way to a target are no edge back to an ancestor. An
                # ancestor imported by name (``import pdc_core.x`` or ``from pdc_core.x
                # import name`` inside pdc_core.x.y) is one: its __init__ imports us.
                ancestor = name.startswith(prefix + ".") and depth < len(parts)
                if prefix in modules and prefix != name and not ancestor:
                    graph[name].add(prefix)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def connect(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_graph_sees_function_level_imports() -> None:
    graph = _graph()
    assert "pdc_core._plugins" in graph["pdc_core._buffer"]
    assert "pdc_core._cli._bench" in graph["pdc_core._cli._main"]  # imported inside a function


def test_no_import_cycles_inside_pdc_core() -> None:
    assert _cycles(_graph()) == []


def test_the_device_layer_knows_no_actor() -> None:
    """The backend contract and the persistent-kernel spec name no actor, not even for
    types: the device stack and the actor stack meet only in _persistent, where the
    kernel users build declares the type of its handle, beside the handle."""
    graph = _graph()
    actors = ("pdc_core._actors", "pdc_core._persistent", "pdc_core.lowlevel")
    assert not {
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith("pdc_core._backend")
        for target in targets
        if target.startswith(actors)
    }


def test_type_only_imports_are_arrows_too() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pdc_core.a\n")
    assert _imports(tree, "pdc_core.b", False) == ["typing", "typing.TYPE_CHECKING", "pdc_core.a"]


PLUGINS = sorted(path.parent for path in (ROOT / "plugins").glob("*/src/*/__init__.py"))

#: Each plugin's modules, bottom layer first: a module imports (at run time or for types)
#: only modules of its own layer or below, and nothing in a layer imports the backend
#: class above it. pdc_cuda follows numba-cuda's driver and CuPy's cupy/cuda/: the
#: driver and its contexts at the bottom, then memory and streams, kernels, where a
#: resident kernel runs, resident kernels and pipelines, the CudaBackend facade, and on
#: top what is built on the facade (the package, graphs, the host-build test kit).
LAYERS: dict[str, list[set[str]]] = {
    "pdc_cuda": [
        {"_version", "_exceptions", "_launch", "_numa", "_codegen", "_availability", "_residency"},
        {"_nvrtc", "_properties", "_ring_source", "_memory", "_streams"},
        {"_context"},
        {"_kernels", "_numba"},
        {"_places"},
        {"_persistent", "_pipeline"},
        {"_backend"},
        {"", "_bench", "_graphs", "graphs", "testing", "testing._backend", "testing._build"}
        | {"testing._plan", "testing._tsan", "testing.__main__"},
    ],
    "pdc_metal": [
        {"_version", "_mlx"},
        {"_kernels", "_streams", "_persistent"},
        {"_memory"},
        {"_work"},
        {"_backend"},
        {""},
    ],
    "pdc_cpu": [
        {"_version", "_memory", "_streams", "_persistent"},
        {"_backend"},
        {""},
    ],
    # pdc_ray: the wire and the engines at the bottom; then the remote actor's runner by
    # role (its state, then the caller's and the keeper's sides, which know nothing of
    # each other, then the runner that joins them), the kernel runner built on it,
    # placements, and on top what is built on placements (meshes, connect, the plugin).
    "pdc_ray": [
        {"_version", "_errors", "_bridge"},
        {"_wire"},
        {"_engine", "_host"},
        {"_ray_engine", "testing"},
        {"_runner_state"},
        {"_runner_caller", "_runner_keeper"},
        {"_runner"},
        {"_kernel"},
        {"_placement"},
        {"_mesh", "_connect"},
        {"", "_plugin"},
    ],
}


@pytest.mark.parametrize("src", PLUGINS, ids=lambda src: src.name)
def test_no_import_cycles_inside_a_plugin(src: Path) -> None:
    assert _cycles(_graph(src)) == []


def _upward(graph: dict[str, set[str]], package: str, layers: list[set[str]]) -> list[str]:
    """The arrows of ``graph`` that point to a higher layer of ``layers``."""
    layer_of: dict[str, int] = {}
    for index, layer in enumerate(layers):
        for short in layer:
            layer_of[f"{package}.{short}" if short else package] = index
    unplaced = sorted(set(graph) - set(layer_of))
    assert unplaced == [], f"place these modules in LAYERS[{package!r}]"
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer_of[target] > layer_of[module]
    )


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_a_plugin_s_modules_import_only_down(package: str) -> None:
    (src,) = [path for path in PLUGINS if path.name == package]
    assert _upward(_graph(src), package, LAYERS[package]) == []


def test_the_remote_runner_s_two_sides_know_nothing_of_each_other() -> None:
    (src,) = [path for path in PLUGINS if path.name == "pdc_ray"]
    graph = _graph(src)
    assert "pdc_ray._runner_keeper" not in graph["pdc_ray._runner_caller"]
    assert "pdc_ray._runner_caller" not in graph["pdc_ray._runner_keeper"]


def test_the_layer_check_sees_an_arrow_up() -> None:
    layers = [{"_kernels"}, {"_backend"}, {""}]
    down = {"pkg": {"pkg._backend"}, "pkg._backend": {"pkg._kernels"}, "pkg._kernels": set()}
    assert _upward(down, "pkg", layers) == []
    up = {**down, "pkg._kernels": {"pkg._backend"}}  # a type hint naming the facade
    assert _upward(up, "pkg", layers) == ["pkg._kernels -> pkg._backend"]
    with pytest.raises(AssertionError, match="place these modules"):
        _upward({**down, "pkg._new": set()}, "pkg", layers)


def test_the_graph_sees_a_module_importing_its_own_package() -> None:
    tree = ast.parse("import pdc_core.cuda\nfrom . import _sibling\nfrom . import jit\n")
    modules = frozenset({"pdc_core.cuda", "pdc_core.cuda._simulator", "pdc_core.cuda._sibling"})
    found = _imports(tree, "pdc_core.cuda._simulator", False, modules)
    package = "pdc_core.cuda"
    assert found == [package, f"{package}._sibling", package, f"{package}.jit"]


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_plugin_layer_s_decisions_import_no_loading() -> None:
    """Discovery and the two decisions run no plugin code and know nothing of loading:
    their imports inside pdc_core are pinned."""
    graph = _graph()
    rooms = "pdc_core._plugins"
    contract = {"pdc_core._backend", "pdc_core._backend._contract", "pdc_core._exceptions"}
    assert graph[f"{rooms}._discovery"] == {f"{rooms}._hookspecs"}
    assert graph[f"{rooms}._selection"] == {f"{rooms}._discovery"}
    below = {f"{rooms}._discovery", f"{rooms}._hookspecs"}
    assert graph[f"{rooms}._validation"] == below | contract


def test_the_nursery_knows_no_kind_of_actor() -> None:
    graph = _graph()
    assert not {name for name in graph["pdc_core._actors._nursery"]} - {
        "pdc_core._actors",
        "pdc_core._actors._mailbox",
        "pdc_core._actors._mesh",  # many actors of any kind (start_mesh); knows no kind
        "pdc_core._actors._nursery_lifecycle",  # its state and lifecycle, by role
        "pdc_core._actors._refs",
        "pdc_core._actors._restart",  # the restart policy of start_actor(restart=...)
        "pdc_core._exceptions",
        "pdc_core._loop",
    }
    # The lifecycle half knows runners and refs only: not even how actors start.
    assert graph["pdc_core._actors._nursery_lifecycle"] == {
        "pdc_core._actors._refs",
        "pdc_core._exceptions",
        "pdc_core._loop",
    }


#: The floors of a Mailbox (pdc_core._actors._mailbox_state's docstring), bottom first:
#: the state, the policy over it, the anyio stream and the single-consumer lane side by
#: side over the policy, and the Mailbox that is both.
MAILBOX_FLOORS: list[set[str]] = [
    {"_mailbox_state"},
    {"_mailbox_policy"},
    {"_mailbox_stream", "_mailbox_lane"},
    {"_mailbox"},
]


def test_a_mailbox_s_floors_import_only_down() -> None:
    graph = _graph()
    package = "pdc_core._actors"
    floors = {f"{package}.{short}" for floor in MAILBOX_FLOORS for short in floor}
    inside = {module: graph[module] & floors for module in floors}
    assert _upward(inside, package, MAILBOX_FLOORS) == []
    # The stream and the lane know only the floors below them, not each other.
    assert f"{package}._mailbox_lane" not in graph[f"{package}._mailbox_stream"]
    assert f"{package}._mailbox_stream" not in graph[f"{package}._mailbox_lane"]
    # Below the Mailbox, the floors know nothing of pdc_core but the loop and errors.
    allowed = floors | {"pdc_core._actors", "pdc_core._exceptions", "pdc_core._loop"}
    allowed |= {"pdc_core._loop._cancel"}
    below = floors - {f"{package}._mailbox"}
    assert {
        f"{module} -> {target}"
        for module in below
        for target in graph[module]
        if target.startswith("pdc_core") and target not in allowed
    } == set()


#: The faces a backend plugin may import (design.md §7); pdc_core.lowlevel is for new
#: kinds of actor, not backends.
PLUGIN_FACES = {"pdc_core", "pdc_core.backend", "pdc_core.cuda", "pdc_core.testing"}
#: Plugins that are new kinds of actor, not backends, and may also import
#: pdc_core.lowlevel (design.md §7: pdc-ray).
ACTOR_KIND_PLUGINS = {"pdc_ray"}
ACTOR_KIND_FACES = PLUGIN_FACES | {"pdc_core.lowlevel"}


def _extender_files() -> list[Path]:
    files = sorted((ROOT / "plugins").rglob("*.py")) + sorted((ROOT / "examples").rglob("*.py"))
    return [path for path in files if ".venv" not in path.parts and "build" not in path.parts]


def _pdc_imports(tree: ast.AST) -> list[tuple[int, str, str | None]]:
    """(line, module, imported name or None) for every import of a pdc_core module."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return [entry for entry in found if entry[1].split(".")[0] == "pdc_core"]


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:  # the parent is a module, not a package
        return False


def _wrong_imports(source: str, *, plugin: bool, actor_kind: bool = False) -> list[str]:
    """Imports of private pdc_core names; for a plugin, also of modules outside its faces
    (a plugin that is a kind of actor, ``actor_kind``, has pdc_core.lowlevel too)."""
    faces = ACTOR_KIND_FACES if actor_kind else PLUGIN_FACES
    wrong = []
    for line, module, name in _pdc_imports(ast.parse(source)):
        dotted = module if name is None else f"{module}.{name}"
        if name is not None and _is_module(dotted):
            module = dotted  # `from pdc_core import lowlevel` imports the module
        private = any(p.startswith("_") and not p.startswith("__") for p in dotted.split("."))
        outside = module not in faces and not module.startswith("pdc_core.testing.")
        if private or (plugin and outside):
            wrong.append(f"line {line}: {dotted}")
    return wrong


def test_the_import_check_catches_what_it_must() -> None:
    source = "from pdc_core import lowlevel\nfrom pdc_core._actors import Mailbox\n"
    assert _wrong_imports(source, plugin=True) == [
        "line 1: pdc_core.lowlevel",
        "line 2: pdc_core._actors.Mailbox",
    ]
    assert _wrong_imports(source, plugin=False) == ["line 2: pdc_core._actors.Mailbox"]
    assert _wrong_imports("from pdc_core.backend import Backend, hookimpl", plugin=True) == []
    # A kind of actor (pdc-ray) may use pdc_core.lowlevel, never a private module.
    assert _wrong_imports(source, plugin=True, actor_kind=True) == [
        "line 2: pdc_core._actors.Mailbox"
    ]
    assert _wrong_imports("from pdc_core.lowlevel import ActorRunner", plugin=True) == [
        "line 1: pdc_core.lowlevel.ActorRunner"
    ]
    assert (
        _wrong_imports("from pdc_core.lowlevel import ActorRunner", plugin=True, actor_kind=True)
        == []
    )


@pytest.mark.parametrize("path", _extender_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_plugins_and_examples_import_only_public_faces(path: Path) -> None:
    parts = path.relative_to(ROOT).parts
    plugin = parts[0] == "plugins"
    actor_kind = plugin and parts[1] in ACTOR_KIND_PLUGINS
    assert _wrong_imports(path.read_text(), plugin=plugin, actor_kind=actor_kind) == []


def test_the_nursery_s_type_hints_name_no_kind_of_actor() -> None:
    """Not even under TYPE_CHECKING: start_actor's overloads use the protocols of
    pdc_core._actors._refs (ActorLike, StartsAs, RunsAs), which kinds satisfy."""
    paths = [SRC / "_actors" / "_nursery.py", SRC / "_actors" / "_nursery_lifecycle.py"]
    kinds = ("_mailbox_actor", "_persistent", "_backend", "_seed", "_mesh_mailbox")
    source = "\n".join(path.read_text() for path in paths)
    imported = [
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    ]
    assert not [module for module in imported if set(module.split(".")) & set(kinds)]
    for name in ("KernelActorRef", "PersistentKernelActor", "RecordLike", "MailboxActorRef"):
        assert name not in source.replace(f"~pdc_core.{name}", "")  # docs may link to them


# -- PyDotCompute's API: one private room behind thin public paths ---------------------

#: PyDotCompute's public import paths under pdc_core (docs/migrating-from-pydotcompute.md).
PYDOTCOMPUTE_PATHS = ("core", "ring_kernels", "decorators", "compilation", "backends")
#: The faces the room (pdc_core._pydotcompute) builds on.
PYDOTCOMPUTE_FACES = {"pdc_core", "pdc_core.backend", "pdc_core.lowlevel"}
#: Every private module the room imports besides the faces and itself, and why. The
#: seed facade is imported by pdc_core's own __init__ (pdc_core.RingKernelRuntime,
#: ...), so it cannot import pdc_core by name: pdc's errors and actor names come from
#: where pdc_core takes them. Nothing else is allowed to grow here.
PYDOTCOMPUTE_PRIVATE = {
    # pdc_core's errors (KernelStateError, MessageTimeout, ...), by the seed facade
    "pdc_core._pydotcompute._seed._messages": {"pdc_core._exceptions"},
    "pdc_core._pydotcompute._seed._runtime": {
        "pdc_core._exceptions",
        "pdc_core._actors",  # open_nursery, RestartPolicy, Backpressure: pdc_core's names
    },
    "pdc_core._pydotcompute._seed._persistent_runtime": {
        "pdc_core._exceptions",
        "pdc_core._persistent",  # KernelActorRef, PersistentKernelActor: pdc_core's names
    },
    "pdc_core._pydotcompute._seed._ring_kernel": {
        "pdc_core._exceptions",
        # the mailbox's fast path, which the seed's receive loop shares: Mailbox's EMPTY,
        # CATCH_UP_AT, BatchReply, and the loop's TURN_CHECK_EVERY (fair turns)
        "pdc_core._actors",
        "pdc_core._loop",
    },
    # zero_fill, the one fill that takes raw bytes (V5); not a public name
    "pdc_core._pydotcompute.backends.cpu": {"pdc_core._buffer"},
    # BufferError and MessageError, bases pdc keeps private; PyDotCompute's path has them
    "pdc_core._pydotcompute.exceptions": {"pdc_core._exceptions"},
}


def test_pydotcompute_s_room_imports_pdc_s_faces_only() -> None:
    graph = _graph()
    room = {
        name: targets
        for name, targets in graph.items()
        if ".".join(name.split(".")[:2]) == "pdc_core._pydotcompute"
    }
    assert len(room) > 20  # every module of the room, not a sample
    assert graph["pdc_core._pydotcompute"] == set()  # pdc_core loads the seed alone
    found = {
        name: {t for t in targets if not t.startswith("pdc_core._pydotcompute")}
        - PYDOTCOMPUTE_FACES
        for name, targets in room.items()
    }
    assert {name: private for name, private in found.items() if private} == PYDOTCOMPUTE_PRIVATE


#: The room's floors, bottom first: a module imports (at run time or for types) only
#: modules of its own floor or below. The seed facade is built first, from parts that
#: know nothing of each other up to its runtime; PyDotCompute's layers sit on the facade.
PYDOTCOMPUTE_FLOORS = [
    # packages that import nothing (pdc_core loads the seed alone), and leaf modules:
    # the wire format, kernel states, the telemetry snapshot, PyDotCompute's errors
    {"", "backends", "compilation", "core", "decorators", "ring_kernels"},
    {"_seed._wire", "_seed._lifecycle", "_seed._telemetry", "exceptions"},
    # messages; the layers that need no kernel
    {"_seed._messages", "backends.base", "core.memory_pool", "core.unified_buffer"},
    {"decorators.kernel", "ring_kernels.queue", "compilation.compiler"},
    # kernels: the mailbox kernel and the persistent one; devices and compiled code
    {"_seed._ring_kernel", "_seed._persistent_runtime", "backends.cpu", "core.accelerator"},
    {"compilation.cache"},
    # the runtime, then the facade; the orchestrator
    {"_seed._runtime", "core.orchestrator"},
    {"_seed"},
    # PyDotCompute's layers over the facade
    {"decorators.ring_kernel", "decorators.validators"},
    {
        "ring_kernels.lifecycle",
        "ring_kernels.message",
        "ring_kernels.runtime",
        "ring_kernels.telemetry",
    },
]


def _path_files() -> list[Path]:
    files = [SRC / "exceptions.py"]
    for path in PYDOTCOMPUTE_PATHS:
        files += sorted((SRC / path).rglob("*.py"))
    return files


def _not_re_exports(source: str) -> list[str]:
    """The statements of ``source`` that are not a re-export: any definition (at any
    depth), anything at the top level but imports, the docstring, ``__all__ = [...]``
    and ``publish(...)`` (which gives the names their public ``__module__``)."""
    tree = ast.parse(source)
    found = [
        f"line {node.lineno}: {type(node).__name__}"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda)
    ]
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Assign):
            if [getattr(target, "id", None) for target in node.targets] == ["__all__"]:
                continue
        elif isinstance(node, ast.Expr):
            value = node.value
            if isinstance(value, ast.Constant):
                continue
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "publish":
                continue
        found.append(f"line {node.lineno}: {type(node).__name__}")
    return sorted(set(found))


def test_the_re_export_check_sees_a_definition() -> None:
    source = 'from x import y\n__all__ = ["y"]\ndef f() -> None: ...\nZ = y\npublish(1)\n'
    assert _not_re_exports(source) == ["line 3: FunctionDef", "line 4: Assign"]


@pytest.mark.parametrize("path", _path_files(), ids=lambda path: str(path.relative_to(SRC)))
def test_pydotcompute_s_paths_only_re_export(path: Path) -> None:
    assert _not_re_exports(path.read_text()) == []


def test_the_cli_takes_the_seed_names_from_the_public_face() -> None:
    graph = _graph()
    cli = {
        target
        for name, targets in graph.items()
        if name.startswith("pdc_core._cli")
        for target in targets
    }
    assert not {target for target in cli if target.startswith("pdc_core._pydotcompute")}


def _inside(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The arrows of ``graph`` between the modules of ``package`` (the package included)."""

    def member(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    return {
        name: {target for target in targets if member(target)}
        for name, targets in graph.items()
        if member(name)
    }


#: pdc_core's rooms built by role, bottom layer first (the package's ``__init__`` on top
#: re-exports them): each module imports only its own layer or below.
CORE_LAYERS: dict[str, list[set[str]]] = {
    # The ring protocol: layout and constants; records; ring memory; then the two ends.
    "pdc_core._backend._ring": [{"_layout"}, {"_records"}, {"_memory"}, {"_host", "_device"}, {""}],
    # The plugin layer (as pluggy splits _manager, _hooks, _callers and _result): the
    # hooks; discovery of entry points; the two pure decisions, what PDC_PLUGINS selects
    # and whether hooks and registrations are valid; loading; the registry of backends.
    "pdc_core._plugins": [
        {"_hookspecs"},
        {"_discovery"},
        {"_selection", "_validation"},
        {"_loader"},
        {"_registry"},
        {""},
    ],
    # PyDotCompute's API (see PYDOTCOMPUTE_FLOORS above).
    "pdc_core._pydotcompute": PYDOTCOMPUTE_FLOORS,
    # The kernel simulator: limits and modes; lane values; lane memory (arrays, undo log,
    # atomics); thread and block state; the vocabulary; lane built-ins; rebinding; the
    # engine; the numba bridge. Protocols below name the chunk run and the lane state.
    "pdc_core.cuda._simulator": [
        {"_limits"},
        {"_values"},
        {"_memory"},
        {"_state"},
        {"_vocabulary"},
        {"_builtins"},
        {"_rebinding"},
        {"_engine"},
        {"_numba_bridge"},
        {""},
    ],
}

#: The persistent-kernel session by role, bottom first: the reply router knows the ring
#: only; the leader calls the router; the session (its lifecycle base, then its API)
#: calls both. Nothing calls up, so none of them imports a room above it.
SESSION_ROOMS = [
    "pdc_core._persistent._router",
    "pdc_core._persistent._leader",
    "pdc_core._persistent._session_types",
    "pdc_core._persistent._lifecycle",
    "pdc_core._persistent._session",
]


@pytest.mark.parametrize("package", sorted(CORE_LAYERS))
def test_a_core_room_s_modules_import_only_down(package: str) -> None:
    graph = _inside(_graph(), package)
    assert _upward(graph, package, CORE_LAYERS[package]) == []


def test_the_ring_s_two_ends_know_nothing_of_each_other() -> None:
    graph = _graph()
    assert "pdc_core._backend._ring._device" not in graph["pdc_core._backend._ring._host"]
    assert "pdc_core._backend._ring._host" not in graph["pdc_core._backend._ring._device"]


def test_the_session_s_rooms_import_only_down() -> None:
    graph = _graph()
    floor = {room: index for index, room in enumerate(SESSION_ROOMS)}
    upward = sorted(
        f"{room} -> {target}"
        for room in SESSION_ROOMS
        for target in graph[room]
        if target in floor and floor[target] > floor[room]
    )
    assert upward == []
    # The router knows the ring and the kernel's handle, not who waits or the API.
    assert not {target for target in graph["pdc_core._persistent._router"] if target in floor}
    assert "pdc_core._persistent._router" in graph["pdc_core._persistent._leader"]
