"""CUDA stages of the pipeline tests (``test_cuda_gpu_pipeline.py``), in one place so that
``test_cuda_pipeline_source.py`` compiles every one of them with NVRTC on every CI run.

The stages mirror ``plugins/pdc_cpu/tests/test_cpu_pipeline.py``: records
``(id: u8, x: f8)``; stage a adds 1, b doubles, c subtracts 3.
"""

from __future__ import annotations

import numpy as np

from pdc_core import PersistentKernel, PersistentPipeline

REC = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)

#: Error codes the failing bodies return (body-defined codes start at 256).
FRAGILE_CODE = 301
NEGATIVE_CODE = 302


def body(expression: str, check: str = "") -> str:
    """A stage body: ``reply.x = <expression of x>``; ``check`` may return early."""
    return (
        "__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {\n"
        "    const double x = request.x;\n"
        f"    {check}\n"
        "    reply.id = request.id;\n"
        f"    reply.x = {expression};\n"
        "    return 0;\n"
        "}\n"
    )


ADD_ONE = body("x + 1.0")
TWICE = body("x * 2.0")
MINUS_THREE = body("x - 3.0")
#: Doubles, but fails on x == 14 (record 13 after stage a): code FRAGILE_CODE.
FRAGILE = body("x * 2.0", f"if (x == 14.0) return {FRAGILE_CODE};")
#: Passes x on, but fails on a negative x: code NEGATIVE_CODE.
NEGATIVE_FAILS = body("x", f"if (x < 0.0) return {NEGATIVE_CODE};")


#: The gated stage's device state: the device address of the gate (two u32 words of
#: mapped host memory) and the x it holds. Passed at run time, so the source is one
#: text whatever the address: compiled once (NVRTC, and the host build's cache).
GATE_STATE = np.dtype([("gate", "<u8"), ("hold", "<f8")], align=True)

#: Doubles x, but holds the record with x == state->hold: it stores 1 into the u32 at
#: state->gate (*entered*), then waits until the host stores non-zero into the next u32
#: (*release*).
GATED = (
    "__device__ int pdc_body(const pdc_request& request, pdc_reply& reply, pdc_state* state) {\n"
    "    const double x = request.x;\n"
    "    if (x == state->hold) {\n"
    "        unsigned int* gate = reinterpret_cast<unsigned int*>(state->gate);\n"
    "        cuda::atomic_ref<unsigned int, cuda::thread_scope_system> entered(gate[0]);\n"
    "        cuda::atomic_ref<unsigned int, cuda::thread_scope_system> release(gate[1]);\n"
    "        entered.store(1u, cuda::memory_order_relaxed);\n"
    "        while (release.load(cuda::memory_order_relaxed) == 0u) __nanosleep(1000);\n"
    "    }\n"
    "    reply.id = request.id;\n"
    "    reply.x = x * 2.0;\n"
    "    return 0;\n"
    "}\n"
)


def gate_state(address: int, hold: int) -> np.ndarray:
    """The state of a :data:`GATED` stage b holding record ``hold`` (x == hold + 1 after
    stage a), its gate at device address ``address``."""
    state = np.zeros(1, GATE_STATE)
    state["gate"] = address
    state["hold"] = float(hold + 1)
    return state


def stage(
    name: str, source: str, capacity: int = 4, state: np.ndarray | None = None
) -> PersistentKernel:
    kernel = PersistentKernel(name, REC, REC, capacity=capacity, state=state)
    kernel.add_body("cuda", source)
    return kernel


def abc(
    caps: tuple[int, int, int] = (4, 3, 5),
    middle: str = TWICE,
    middle_state: np.ndarray | None = None,
) -> PersistentPipeline:
    """a -> b -> c with link capacities ``caps``; ``middle`` is stage b's body (with
    ``middle_state``, its device state)."""
    return PersistentPipeline(
        stage("a", ADD_ONE, caps[0]),
        stage("b", middle, caps[1], middle_state),
        stage("c", MINUS_THREE, caps[2]),
    )


def records(count: int, start: int = 0) -> np.ndarray:
    batch = np.zeros(count, REC)
    batch["id"] = np.arange(start, start + count)
    batch["x"] = np.arange(start, start + count, dtype=np.float64)
    return batch


def expected(x: np.ndarray) -> np.ndarray:
    return (x + 1) * 2 - 3


#: Every stage body the GPU tests use (STATES: the state dtype of those that have one).
SOURCES = {
    "add_one": ADD_ONE,
    "twice": TWICE,
    "minus_three": MINUS_THREE,
    "fragile": FRAGILE,
    "negative_fails": NEGATIVE_FAILS,
    "gated": GATED,
}
STATES = {"gated": GATE_STATE}
