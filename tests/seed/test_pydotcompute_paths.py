"""PyDotCompute's import paths work with ``pdc_core`` in place of ``pydotcompute``.

Each path re-exports pdc's own objects (``pdc_core.ring_kernels.message.Request is
pdc_core.Request``) or defines thin layers over them under PyDotCompute's names
(``LAYERS``), and docs/migrating-from-pydotcompute.md lists every path: the ones pdc
provides, with their names, and the names and paths it does not. When PyDotCompute's
source is findable (installed, or put on the path by .ci/pydotcompute-suite from the
sdist its suite runs from), every public name of every public PyDotCompute module is
checked to be in one of the two lists.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pickle
import re
import types
from pathlib import Path
from typing import Any

import pytest

import pdc_core

DOC = Path(__file__).parents[2] / "docs" / "migrating-from-pydotcompute.md"

#: PyDotCompute's module path (after ``pydotcompute``) -> {name: the pdc object}.
PATHS: dict[str, dict[str, object]] = {
    "": {
        "__version__": pdc_core.__version__,
        "BufferState": pdc_core.BufferState,
        "MemoryPool": pdc_core.MemoryPool,
        "RingKernelMessage": pdc_core.Message,
        "RingKernelRuntime": pdc_core.RingKernelRuntime,
        "UnifiedBuffer": pdc_core.UnifiedBuffer,
        "kernel": pdc_core.kernel,
        "message": pdc_core.message,
        "ring_kernel": pdc_core.ring_kernel,
    },
    "backends": {"Backend": pdc_core.Backend},
    "backends.base": {"Backend": pdc_core.Backend},
    "core": {
        "BufferState": pdc_core.BufferState,
        "UnifiedBuffer": pdc_core.UnifiedBuffer,
    },
    "core.unified_buffer": {
        "BufferState": pdc_core.BufferState,
        "UnifiedBuffer": pdc_core.UnifiedBuffer,
    },
    "decorators": {
        "gpu_kernel": pdc_core.kernel,
        "kernel": pdc_core.kernel,
        "ring_kernel": pdc_core.ring_kernel,
    },
    "decorators.kernel": {"gpu_kernel": pdc_core.kernel, "kernel": pdc_core.kernel},
    "decorators.ring_kernel": {"ring_kernel": pdc_core.ring_kernel},
    "exceptions": {
        "BackendError": pdc_core.BackendError,
        "BackendNotAvailableError": pdc_core.BackendUnavailable,
        "BufferNotAllocatedError": pdc_core.BufferNotAllocatedError,
        "KernelAlreadyExistsError": pdc_core.KernelAlreadyExistsError,
        "KernelError": pdc_core.ActorError,
        "KernelNotFoundError": pdc_core.KernelNotFoundError,
        "KernelStateError": pdc_core.KernelStateError,
        "MessageDeserializationError": pdc_core.MessageDeserializationError,
        "MessageSerializationError": pdc_core.MessageSerializationError,
        "PyDotComputeError": pdc_core.PdcError,
        "QueueFullError": pdc_core.MailboxFull,
        "QueueTimeoutError": pdc_core.MessageTimeout,
    },
    "ring_kernels": {
        "KernelState": pdc_core.KernelState,
        "RingKernelMessage": pdc_core.Message,
        "RingKernelRuntime": pdc_core.RingKernelRuntime,
        "message": pdc_core.message,
    },
    "ring_kernels.lifecycle": {
        "KernelContext": pdc_core.RingKernelContext,
        "KernelState": pdc_core.KernelState,
    },
    "ring_kernels.message": {
        "Message": pdc_core.Message,
        "Request": pdc_core.Request,
        "Response": pdc_core.Response,
        "RingKernelMessage": pdc_core.Message,
        "message": pdc_core.message,
    },
    "ring_kernels.runtime": {"RingKernelRuntime": pdc_core.RingKernelRuntime},
}

#: PyDotCompute's module path -> the names it defines as thin layers over pdc's objects
#: (PyDotCompute's API translated to pdc's; not pdc's own API, which stays the one
#: documented for new code).
LAYERS: dict[str, set[str]] = {
    "backends": {"BackendType", "CPUBackend"},
    "backends.base": {"BackendType", "KernelExecutionResult"},
    "backends.cpu": {"CPUBackend", "matrix_multiply_cpu", "vector_add_cpu"},
    "compilation": {"KernelCache", "KernelCompiler"},
    "compilation.cache": {"CacheEntry", "KernelCache", "get_kernel_cache", "warmup_kernels"},
    "compilation.compiler": {
        "CompilationOptions",
        "CompiledKernel",
        "KernelCompiler",
        "compile_kernel",
        "get_compiler",
    },
    "core": {"Accelerator", "ComputeOrchestrator", "MemoryPool"},
    "core.memory_pool": {
        "MemoryPool",
        "PoolStatistics",
        "configure_memory_pool",
        "get_memory_pool",
    },
    "core.accelerator": {
        "Accelerator",
        "DeviceProperties",
        "DeviceType",
        "cuda_available",
        "get_accelerator",
        "metal_available",
    },
    "core.orchestrator": {"ComputeOrchestrator", "KernelExecution", "KernelLaunchConfig"},
    "decorators": {"validate_config", "validate_message"},
    "decorators.kernel": {"KernelRegistry", "cuda_source", "get_kernel_registry"},
    "decorators.ring_kernel": {"RingKernelBuilder", "get_ring_kernel_meta", "is_ring_kernel"},
    "decorators.validators": {
        "RuntimeValidator",
        "get_validator",
        "validate_backpressure_strategy",
        "validate_block_size",
        "validate_config",
        "validate_grid_size",
        "validate_message",
        "validate_priority",
        "validate_queue_size",
    },
    "exceptions": {
        "BufferError",
        "BufferSyncError",
        "CUDAError",
        "CompilationError",
        "InvalidConfigurationError",
        "KernelCompilationError",
        "MSLCompilationError",
        "MessageError",
        "MetalError",
        "TypeValidationError",
        "ValidationError",
    },
    "ring_kernels": {"GPUMonitor", "MessageQueue", "RingKernel", "RingKernelTelemetry"},
    "ring_kernels.lifecycle": {"RingKernel", "RingKernelConfig", "managed_kernel"},
    "ring_kernels.message": {"deserialize_message", "get_message_type"},
    "ring_kernels.queue": {"BackpressureStrategy", "MessageQueue"},
    "ring_kernels.telemetry": {
        "GPUInfo",
        "GPUMonitor",
        "RingKernelTelemetry",
        "TelemetryCollector",
    },
}
#: Layers whose name pdc_core also has, for another object: name -> why.
SHARED_NAMES = {
    "RingKernelTelemetry": "pdc_core's is its other name for Telemetry, the runtime's "
    "snapshot; PyDotCompute's paths have PyDotCompute's recorder, of which a snapshot is "
    "an instance",
    "MemoryPool": "pdc_core's makes a pool; PyDotCompute's path has a view of pdc's "
    "process-wide pool (one object per process, sizes in MiB)",
    "PoolStatistics": "pdc_core's counts hits and misses; PyDotCompute's path has "
    "PyDotCompute's figures, which MemoryPool.get_stats() gives",
    "get_memory_pool": "pdc_core's returns pdc's process-wide pool; PyDotCompute's path "
    "returns its MemoryPool() (the view of that same pool)",
    "RingKernel": "pdc_core's is what runtime.launch returns; PyDotCompute's paths have "
    "the free-standing RingKernel(id, func), of which pdc's is a virtual subclass",
}
ALL_PATHS = sorted(set(PATHS) | set(LAYERS))

CASES = [(path, name, obj) for path, names in PATHS.items() for name, obj in names.items()]


def _pdc_module(path: str) -> str:
    return f"pdc_core.{path}" if path else "pdc_core"


def _pydotcompute_module(path: str) -> str:
    return f"pydotcompute.{path}" if path else "pydotcompute"


@pytest.mark.parametrize(
    ("path", "name", "obj"), CASES, ids=[f"{path or 'pdc_core'}:{name}" for path, name, _ in CASES]
)
def test_the_path_exports_the_pdc_object_itself(path: str, name: str, obj: object) -> None:
    module = importlib.import_module(_pdc_module(path))
    assert getattr(module, name) is obj
    assert name in module.__all__


@pytest.mark.parametrize("path", [path for path in ALL_PATHS if path])
def test_each_path_exports_exactly_its_names(path: str) -> None:
    module = importlib.import_module(_pdc_module(path))
    assert sorted(module.__all__) == sorted(set(PATHS.get(path, {})) | LAYERS.get(path, set()))
    assert (module.__doc__ or "").startswith(
        f"PyDotCompute's import path ``{_pydotcompute_module(path)}``"
    )


def test_the_seeds_import_lines_work() -> None:
    from pdc_core.decorators import kernel, ring_kernel
    from pdc_core.exceptions import KernelNotFoundError, QueueTimeoutError
    from pdc_core.ring_kernels import RingKernelRuntime, message
    from pdc_core.ring_kernels.message import Request, Response

    assert (Request, Response, RingKernelRuntime) == (
        pdc_core.Request,
        pdc_core.Response,
        pdc_core.RingKernelRuntime,
    )
    assert (kernel, ring_kernel, message) == (
        pdc_core.kernel,
        pdc_core.ring_kernel,
        pdc_core.message,
    )
    assert issubclass(QueueTimeoutError, TimeoutError)
    assert issubclass(KernelNotFoundError, pdc_core.PdcError)


def test_a_decorator_is_not_shadowed_by_its_submodule() -> None:
    # pdc_core.ring_kernels.message is a module, pdc_core.ring_kernels's ``message`` the
    # decorator, whichever is imported first (as in PyDotCompute).
    for package, name in [
        ("ring_kernels", "message"),
        ("decorators", "kernel"),
        ("decorators", "ring_kernel"),
    ]:
        submodule = importlib.import_module(f"pdc_core.{package}.{name}")
        assert isinstance(submodule, types.ModuleType)
        assert getattr(importlib.import_module(f"pdc_core.{package}"), name) is getattr(
            pdc_core, name
        )


@pytest.mark.parametrize(
    ("path", "name"),
    [(path, name) for path, names in sorted(LAYERS.items()) for name in sorted(names)],
)
def test_a_layer_is_defined_on_pydotcompute_s_paths_not_in_pdc_s_api(path: str, name: str) -> None:
    obj = getattr(importlib.import_module(_pdc_module(path)), name)
    assert obj.__module__.removeprefix("pdc_core.") in ALL_PATHS  # a PyDotCompute path
    if name in SHARED_NAMES:
        assert getattr(pdc_core, name) is not obj
    else:
        assert not hasattr(pdc_core, name), f"{name} is a layer, not pdc's own API"
    assert obj.__doc__, f"{path}.{name} needs a docstring"


def test_the_paths_keep_the_public_module_of_what_they_export() -> None:
    for _, name, obj in CASES:
        if isinstance(obj, type | types.FunctionType):
            assert obj.__module__ in {"pdc_core", "pdc_core.backend"}, name


# --------------------------------------------------------------------------------------
# The tables of docs/migrating-from-pydotcompute.md
# --------------------------------------------------------------------------------------

_CODE = re.compile(r"`([^`]+)`")


def _section(title: str) -> list[list[str]]:
    """The rows of the table under ``## title`` that start with a PyDotCompute path."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start : end if end != -1 else None].splitlines():
        if line.startswith("| `pydotcompute"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert rows, f"no table under '## {title}'"
    return rows


def _path(cell: str) -> str:
    match = _CODE.fullmatch(cell)
    assert match, cell
    dotted = match[1]
    assert dotted == "pydotcompute" or dotted.startswith("pydotcompute."), dotted
    return dotted.removeprefix("pydotcompute").removeprefix(".")


def _names(cell: str) -> set[str]:
    """The names in backquotes (a dotted ``pdc_core.X`` in a note is not one)."""
    return {code for code in _CODE.findall(cell) if code.isidentifier()}


def _documented_paths() -> dict[str, set[str] | None]:
    """Import-paths table: PyDotCompute path -> the names pdc_core has there, or None."""
    table: dict[str, set[str] | None] = {}
    for pydotcompute, pdc, names in _section("Import paths"):
        path = _path(pydotcompute)
        assert path not in table, f"{pydotcompute} is listed twice"
        if pdc == "not provided":
            table[path] = None
        else:
            assert pdc == f"`{_pdc_module(path)}`", pdc
            table[path] = _names(names)
    return table


def _documented_missing() -> dict[str, set[str]]:
    """Not-provided table: PyDotCompute path -> the names pdc does not provide."""
    missing: dict[str, set[str]] = {}
    for pydotcompute, names, _instead in _section("Names not provided"):
        missing.setdefault(_path(pydotcompute), set()).update(_names(names))
    return missing


def test_the_docs_list_exactly_the_provided_paths_and_names() -> None:
    provided = {path: names for path, names in _documented_paths().items() if names is not None}
    assert provided == {
        path: set(PATHS.get(path, {})) | LAYERS.get(path, set()) for path in ALL_PATHS
    }


@pytest.mark.parametrize("path", sorted(_documented_paths()))
def test_every_path_in_the_docs_exists_or_is_said_not_to(path: str) -> None:
    names = _documented_paths()[path]
    if names is None:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(_pdc_module(path))
        assert _documented_missing().get(path), f"say which names of {path} are missing"
        return
    module = importlib.import_module(_pdc_module(path))
    assert all(hasattr(module, name) for name in names)
    assert not names & _documented_missing().get(path, set())


def test_the_not_provided_table_names_only_listed_paths() -> None:
    assert set(_documented_missing()) <= set(_documented_paths())


# --------------------------------------------------------------------------------------
# Against PyDotCompute itself, when it is installed (read, never imported: importing
# pydotcompute.ring_kernels installs uvloop)
# --------------------------------------------------------------------------------------


def _pydotcompute_public_names() -> dict[str, set[str]]:
    spec = importlib.util.find_spec("pydotcompute")
    if spec is None or spec.origin is None:
        pytest.skip("PyDotCompute is not installed")
    root = Path(spec.origin).parent
    found: dict[str, set[str]] = {}
    for file in sorted(root.rglob("*.py")):
        parts = list(file.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(part.startswith("_") for part in parts):
            continue  # a private module
        tree = ast.parse(file.read_text(encoding="utf-8"))
        declared: list[str] | None = None
        defined: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
                if "__all__" in targets:
                    declared = ast.literal_eval(node.value)
                elif not (
                    isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                    and node.value.func.id == "TypeVar"
                ):
                    defined |= targets
        public = set(declared) if declared is not None else defined
        found[".".join(parts)] = {
            name for name in public if name == "__version__" or not name.startswith("_")
        } - {"logger"}
    return found


def test_every_public_pydotcompute_module_is_in_the_docs() -> None:
    assert set(_documented_paths()) == set(_pydotcompute_public_names())


def test_every_public_pydotcompute_name_is_provided_or_said_not_to_be() -> None:
    provided = {path: names or set() for path, names in _documented_paths().items()}
    missing = _documented_missing()
    unlisted = {
        f"pydotcompute{'.' if path else ''}{path}.{name}"
        for path, names in _pydotcompute_public_names().items()
        for name in names
        if name not in provided.get(path, set()) | missing.get(path, set())
    }
    assert unlisted == set()
    real = _pydotcompute_public_names()
    for path, names in missing.items():  # only real names are said missing, and only once
        assert names <= real[path], (path, names - real[path])
        assert not names & provided.get(path, set()), path


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The names a caller can pass by keyword (``self``/``cls`` and ``*args`` left out)."""
    arguments = function.args
    named = [arg.arg for arg in arguments.args + arguments.kwonlyargs]
    return [name for name in named if name not in ("self", "cls")]


def _accepted(target: Any) -> set[str] | None:
    """The keywords ``target`` accepts, or None for any (a ``**kwargs`` of its own)."""
    owner = getattr(target, "__objclass__", None)
    if isinstance(owner, type) and issubclass(owner, BaseException):
        return set()  # a built-in exception's __init__ takes no keyword
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return None
    return {
        parameter.name
        for parameter in parameters
        if parameter.kind is not parameter.POSITIONAL_ONLY
    }


def _pydotcompute_differences() -> dict[str, set[str] | None]:
    """PyDotCompute's public functions and methods on the paths pdc provides whose
    keywords pdc's object does not accept (the names missing), or which pdc's class
    does not have (None); keyed ``Class.method``, ``Class`` (its constructor) or
    ``function``."""
    spec = importlib.util.find_spec("pydotcompute")
    if spec is None or spec.origin is None:
        pytest.skip("PyDotCompute is not installed")
    root = Path(spec.origin).parent
    found: dict[str, set[str] | None] = {}
    for path, names in _documented_paths().items():
        if not names:
            continue
        file = root.joinpath(*path.split(".")) if path else root
        file = file / "__init__.py" if file.is_dir() else file.with_suffix(".py")
        module = importlib.import_module(_pdc_module(path))
        for node in ast.parse(file.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names:
                members = [(node.name, getattr(module, node.name), node)]
            elif isinstance(node, ast.ClassDef) and node.name in names:
                owner = getattr(module, node.name)
                members = [
                    (
                        node.name if item.name == "__init__" else f"{node.name}.{item.name}",
                        getattr(owner, item.name, None),
                        item,
                    )
                    for item in node.body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    and (item.name == "__init__" or not item.name.startswith("_"))
                ]
            else:
                continue
            for key, target, function in members:
                wanted = set(_parameters(function))
                accepted = wanted if target is None else _accepted(target)
                if target is None:
                    found[key] = None
                elif accepted is not None and wanted - accepted:
                    found[key] = wanted - accepted
    return found


def _documented_differences() -> dict[str, set[str]]:
    """The section's code spans ``Name(keyword=, ...)`` or ``Name``: name -> keywords."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## Keywords and methods that differ\n")
    end = text.find("\n## ", start + 1)
    listed: dict[str, set[str]] = {}
    for code in _CODE.findall(text[start : end if end != -1 else None]):
        match = re.fullmatch(r"([\w.]+)(?:\(((?:\w+=(?:, )?)+)\))?", code)
        if match:
            keywords = set(re.findall(r"(\w+)=", match[2] or ""))
            listed.setdefault(match[1], set()).update(keywords)
    return listed


def test_every_pydotcompute_keyword_is_accepted_or_its_edit_listed() -> None:
    listed = _documented_differences()
    unlisted = {
        key: missing
        for key, missing in _pydotcompute_differences().items()
        if key not in listed or not (missing or set()) <= listed[key]
    }
    assert unlisted == {}


@pytest.mark.parametrize("path", [path for path in ALL_PATHS if path])
def test_each_name_has_its_public_address(path: str) -> None:
    """The bodies live in pdc_core._pydotcompute; reprs, tracebacks, docs and pickles
    name the public path (or pdc's own face), never the private room."""
    module = importlib.import_module(_pdc_module(path))
    for name in module.__all__:
        obj = getattr(module, name)
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__")):
            assert "._" not in obj.__module__, f"{name}: {obj.__module__}"


def test_pickles_name_the_public_path() -> None:
    from pdc_core.core.memory_pool import PoolStatistics
    from pdc_core.exceptions import TypeValidationError

    figures = PoolStatistics(1, 2, 3)
    dumped = pickle.dumps(figures)
    assert b"pdc_core.core.memory_pool" in dumped
    assert b"_pydotcompute" not in dumped
    assert pickle.loads(dumped) == figures
    assert TypeValidationError.__module__ == "pdc_core.exceptions"


def test_the_same_name_classes_say_which_api_they_are(fresh_pool: Any) -> None:
    from pdc_core.ring_kernels import RingKernel, RingKernelTelemetry

    async def echo(ctx: Any) -> None:
        """Unused: the kernel is never launched."""

    assert repr(fresh_pool.MemoryPool()).startswith("<PyDotCompute's MemoryPool, a view of")
    assert repr(RingKernel("k", echo)) == "<PyDotCompute's RingKernel 'k' state=CREATED>"
    telemetry = RingKernelTelemetry(kernel_id="k")
    assert repr(telemetry).startswith("PyDotCompute's RingKernelTelemetry(kernel_id='k', ")
    for cls in (fresh_pool.MemoryPool, RingKernel, RingKernelTelemetry):
        assert (cls.__doc__ or "").startswith("PyDotCompute's ")
    # pdc's own classes of the same names say nothing of PyDotCompute in their reprs.
    assert "PyDotCompute" not in repr(pdc_core.MemoryPool())
    for cls in (pdc_core.MemoryPool, pdc_core.RingKernel):
        assert "PyDotCompute's" in (cls.__doc__ or "")  # and point to the other class
