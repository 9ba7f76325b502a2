"""The public faces of pdc_core are pinned, complete and documented, both ways.

Adding or removing a name is a decision: the pinned lists below change with it. Every
exported name exists and is documented; every public name defined anywhere in the
package is exported by some ``__all__``; every exported class and function says the
public module it lives at (reprs, tracebacks and pickles use it); pdc's errors and
messages pickle with all their fields.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pickle
import pkgutil
import types
from pathlib import Path
from typing import Any

import pytest

import pdc_core
import pdc_core.backend
import pdc_core.cuda
import pdc_core.lowlevel
import pdc_core.telemetry
import pdc_core.testing

CORE = [
    "Actor",
    "ActorCrashed",
    "ActorError",
    "ActorMesh",
    "ActorNursery",
    "ActorRef",
    "ActorState",
    "ActorStatistics",
    "ActorStopped",
    "Backend",
    "BackendError",
    "BackendInfo",
    "BackendUnavailable",
    "Backpressure",
    "BroadcastReceiveStream",
    "BroadcastSendStream",
    "BroadcastStreamStatistics",
    "BufferNotAllocatedError",
    "BufferState",
    "Capability",
    "CapabilityError",
    "Control",
    "DeviceInfo",
    "DeviceSource",
    "DuplicateActorError",
    "EnvironmentSettingError",
    "Kernel",
    "KernelActorRef",
    "KernelAlreadyExistsError",
    "KernelBodyMissing",
    "KernelNotFoundError",
    "KernelState",
    "KernelStateError",
    "KernelStatus",
    "KernelStopTimeout",
    "KernelTerminated",
    "LaunchConfig",
    "LifecycleError",
    "Mailbox",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "MailboxStatistics",
    "MemoryPool",
    "MeshError",
    "Message",
    "MessageDeserializationError",
    "MessageDropped",
    "MessageSerializationError",
    "MessageTimeout",
    "PdcError",
    "PersistentKernel",
    "PersistentKernelActor",
    "PersistentKernelError",
    "PersistentKernelSession",
    "PersistentPipeline",
    "PersistentPipelineActor",
    "PersistentRingKernel",
    "PipelineSession",
    "PluginError",
    "PluginInfo",
    "PoolError",
    "PoolLimitError",
    "PoolStatistics",
    "RecordError",
    "Request",
    "Response",
    "RestartPolicy",
    "RingKernel",
    "RingKernelContext",
    "RingKernelDefinition",
    "RingKernelMessage",
    "RingKernelRuntime",
    "RingKernelTelemetry",
    "RingProtocolError",
    "SessionState",
    "SessionStatistics",
    "ShutdownTimeout",
    "Telemetry",
    "UnifiedBuffer",
    "__version__",
    "auto_block_size",
    "available_backends",
    "create_broadcast_stream",
    "cuda",
    "get_backend",
    "get_memory_pool",
    "kernel",
    "launch_config",
    "list_plugins",
    "message",
    "open_nursery",
    "open_persistent_kernel",
    "open_persistent_pipeline",
    "persistent_kernel",
    "reload_plugins",
    "ring_kernel",
]

BACKEND = [
    "Availability",
    "Backend",
    "BenchmarkPath",
    "BenchmarkPaths",
    "CONTROL_BLOCK_SIZE",
    "Capability",
    "DEFAULT_MAX_THREADS_PER_BLOCK",
    "DeviceInfo",
    "DeviceSource",
    "Dims",
    "ERROR_MESSAGE_SIZE",
    "ErrorCode",
    "Event",
    "HostWaiter",
    "HostWorkerKernel",
    "KernelStatus",
    "LINE_SIZE",
    "LaunchConfig",
    "LazyBackend",
    "LinkedDevice",
    "MAX_BLOCK_DIMS",
    "MAX_GRID_DIMS",
    "MemoryKind",
    "MemoryStatistics",
    "Offset",
    "PersistentKernel",
    "PersistentKernelSpec",
    "PersistentPipeline",
    "PipelineResident",
    "PollingWaiter",
    "RING_ALIGNMENT",
    "RING_MAGIC",
    "RING_VERSION",
    "ResidentKernel",
    "RingDevice",
    "RingFeature",
    "RingHost",
    "RingLayout",
    "RingMemory",
    "StageLink",
    "StopMode",
    "Stream",
    "ThreadContext",
    "WorkerEvent",
    "WorkerStream",
    "auto_block_size",
    "check_block",
    "check_grid",
    "coerce_batch",
    "coerce_record",
    "copy_records",
    "dim3",
    "dims",
    "hookimpl",
    "launch_config",
    "launch_pipeline",
    "lazy_exports",
    "normalize_shape_dtype",
    "persistent_kernel",
    "problem_size",
    "record_dtype",
    "record_from_mapping",
    "records_copy",
    "sequenced_slot_size",
    "strict_int",
]

LOWLEVEL = [
    "ActorRef",
    "ActorRunner",
    "ActorState",
    "ActorStatistics",
    "DEFAULT_PRIORITY",
    "IncarnationScope",
    "Kit",
    "Placement",
    "StartOptions",
    "TIMED_OUT",
    "TaskHost",
    "Waiter",
    "cancel_called",
    "cancellation_first",
    "check_count",
    "check_duration",
    "check_priority",
    "check_timeout",
    "current_kit",
    "current_task",
    "fail",
    "full_checkpoint",
    "message_priority",
    "raise_cancelled",
    "resolve_backend",
    "runner_for",
    "seconds_or_inf",
    "strict_int",
    "wake",
]

TELEMETRY = ["Instrumentation", "METRICS", "Metric", "instrument"]

FACES: dict[types.ModuleType, list[str]] = {
    pdc_core: CORE,
    pdc_core.backend: BACKEND,
    pdc_core.lowlevel: LOWLEVEL,
    pdc_core.telemetry: TELEMETRY,
}
PUBLIC_MODULES = [
    pdc_core,
    pdc_core.backend,
    pdc_core.lowlevel,
    pdc_core.cuda,
    pdc_core.testing,
    pdc_core.telemetry,
]
SRC = Path(pdc_core.__file__).parent
DOCS = Path(__file__).parents[2] / "docs"


def _exported(module: types.ModuleType) -> list[tuple[str, Any]]:
    return [(name, getattr(module, name)) for name in module.__all__]


@pytest.mark.parametrize("face", list(FACES), ids=lambda module: module.__name__)
def test_all_is_pinned(face: types.ModuleType) -> None:
    assert sorted(face.__all__) == FACES[face]


@pytest.mark.parametrize("face", PUBLIC_MODULES, ids=lambda module: module.__name__)
def test_every_exported_name_exists_and_is_documented(face: types.ModuleType) -> None:
    missing = [name for name in face.__all__ if not hasattr(face, name)]
    assert missing == []
    docs = (face.__doc__ or "") + "".join(path.read_text() for path in DOCS.glob("*.md"))
    undocumented = []
    for name, obj in _exported(face):
        if isinstance(obj, type | types.FunctionType | types.ModuleType):
            doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else obj.__doc__
            generated = isinstance(doc, str) and doc.startswith(f"{name}(")  # a dataclass's
            if not doc or generated:
                undocumented.append(name)
        elif name not in docs and f"#: {name}" not in inspect.getsource(face):
            undocumented.append(name)
    assert undocumented == []


def _modules() -> list[str]:
    names = ["pdc_core"]
    for info in pkgutil.walk_packages([str(SRC)], prefix="pdc_core."):
        if not info.name.endswith("__main__"):
            names.append(info.name)
    return names


def _public_definitions(module_name: str) -> set[str]:
    """Top-level classes, functions and constants a module defines without an underscore."""
    module = importlib.import_module(module_name)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_") and name not in {"M", "R", "T", "F"}}


def test_every_public_name_defined_in_the_package_is_in_some_all() -> None:
    exported: set[str] = set()
    for module_name in _modules():
        exported.update(getattr(importlib.import_module(module_name), "__all__", ()))
    stray = {
        f"{module_name}.{name}"
        for module_name in _modules()
        for name in _public_definitions(module_name)
        if name not in exported
    }
    assert stray == set()


@pytest.mark.parametrize("face", PUBLIC_MODULES, ids=lambda module: module.__name__)
def test_exported_classes_and_functions_live_at_a_public_path(face: types.ModuleType) -> None:
    wrong = []
    for name, obj in _exported(face):
        if not isinstance(obj, type | types.FunctionType) or obj.__name__ != name:
            continue  # a constant, or an alias (RingKernelMessage is Message)
        home = importlib.import_module(obj.__module__)
        private = any(part.startswith("_") for part in obj.__module__.split("."))
        if private or getattr(home, obj.__qualname__, None) is not obj:
            wrong.append(f"{name}: {obj.__module__}")
    assert wrong == []


def test_reprs_and_tracebacks_name_the_public_path() -> None:
    assert repr(pdc_core.ActorCrashed) == "<class 'pdc_core.ActorCrashed'>"
    assert pdc_core.open_nursery.__module__ == "pdc_core"
    assert pdc_core.backend.RingMemory.__module__ == "pdc_core.backend"
    assert pdc_core.lowlevel.ActorRunner.run.__module__ == "pdc_core.lowlevel"


def _errors() -> list[BaseException]:
    cause = ValueError("the cause")
    return [
        pdc_core.ActorCrashed("detector", cause, note=" while starting"),
        pdc_core.ActorStopped("actor 'a' is not running", actor_id="a"),
        pdc_core.MailboxFull("full", capacity=4, accepted=2),
        pdc_core.KernelNotFoundError("k", ["a", "b"]),
        pdc_core.KernelStateError("k", "ACTIVE", "launch", allowed="TERMINATED"),
        pdc_core.PersistentKernelError("double", 257, "bad record"),
        pdc_core.KernelTerminated("done", actor_id="k"),
        pdc_core.MessageTimeout("nothing within 1 s"),
        pdc_core.RecordError("wrong dtype"),
        pdc_core.BackendUnavailable("no cuda"),
        pdc_core.EnvironmentSettingError(
            "PDC_BACKEND", "nope", "no backend is named 'nope'", ["cpu"]
        ),
        pdc_core.ShutdownTimeout(0.5, {"b": 2, "c": 0}),
        pdc_core.BufferNotAllocatedError(),
        pdc_core.MessageSerializationError(pdc_core.Request, cause),
        pdc_core.MessageDeserializationError(pdc_core.Message, cause),
    ]


def test_every_error_class_is_covered_by_the_pickle_test() -> None:
    errors = {name for name, obj in _exported(pdc_core) if isinstance(obj, type)}
    errors = {name for name in errors if issubclass(getattr(pdc_core, name), BaseException)}
    custom_init = {name for name in errors if "__init__" in vars(getattr(pdc_core, name))}
    covered = {type(error).__name__ for error in _errors()}
    assert custom_init <= covered


@pytest.mark.parametrize("error", _errors(), ids=lambda error: type(error).__name__)
def test_errors_pickle_with_all_their_fields(error: BaseException) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.args == error.args
    fields = {key: value for key, value in vars(error).items() if key != "cause"}
    assert {key: vars(copy)[key] for key in fields} == fields
    if isinstance(error, pdc_core.ActorCrashed):
        assert isinstance(copy, pdc_core.ActorCrashed)
        assert repr(copy.cause) == repr(error.cause)
        assert copy.__cause__ is copy.cause
        assert copy.note == " while starting"


@pytest.mark.parametrize(
    "message",
    [
        pdc_core.Request(data={"x": [1, 2]}, priority=200),
        pdc_core.Response(result=42, correlation_id=pdc_core.Request(data=1).message_id),
        pdc_core.Message(priority=7),
    ],
    ids=lambda message: type(message).__name__,
)
def test_messages_pickle_with_all_their_fields(message: pdc_core.Message) -> None:
    copy = pickle.loads(pickle.dumps(message))
    assert type(copy) is type(message)
    assert copy == message
    assert copy.message_id == message.message_id
    assert copy.priority == message.priority
