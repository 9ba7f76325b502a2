"""pdc's counters as OpenTelemetry metrics (issue 27, item 7), read with the SDK's
in-memory reader; the core imports and runs without OpenTelemetry.

Every async test runs under asyncio and trio.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("opentelemetry.sdk.metrics", reason="needs pdc-core[test] (opentelemetry-sdk)")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from pdc_core import (
    Mailbox,
    PersistentKernel,
    Request,
    Response,
    RestartPolicy,
    RingKernelRuntime,
    open_nursery,
    open_persistent_kernel,
    ring_kernel,
)
from pdc_core.telemetry import METRICS, Instrumentation, instrument

LIMIT = 10
ROOT = Path(__file__).parents[2]
REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)

Points = dict[str, list[tuple[dict[str, Any], float]]]


def _double(requests: Any) -> Any:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


KERNEL = PersistentKernel("otel_double", REQ, REP, capacity=16, bodies={"cpu": _double})


@pytest.fixture
def reader() -> tuple[InMemoryMetricReader, MeterProvider]:
    reader = InMemoryMetricReader()
    return reader, MeterProvider(metric_readers=[reader])


def _collect(reader: InMemoryMetricReader) -> Points:
    """Every data point collected now: metric name -> [(attributes, value)]."""
    points: Points = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            assert scope.scope.name == "pdc"
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points.setdefault(metric.name, []).append(
                        (dict(point.attributes or {}), point.value)
                    )
    return points


def _value(points: Points, name: str, **attributes: str) -> float:
    (value,) = [v for attrs, v in points.get(name, []) if attrs == attributes]
    return value


async def echo(message: int) -> int:
    return message


class Flaky:
    """An actor that crashes on a negative message."""

    async def __call__(self, message: int) -> int:
        if message < 0:
            raise ValueError("negative")
        return message


async def test_actor_and_mailbox_counters_are_exported(reader) -> None:
    memory, provider = reader
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            handle = instrument(nursery, meter_provider=provider)
            ref = await nursery.start_actor(echo, name="echo", capacity=8)
            for i in range(5):
                assert await ref.ask(i) == i
            for i in range(3):
                await ref.tell(i)
            flaky = await nursery.start_actor(
                Flaky(), name="flaky", restart=RestartPolicy(max_restarts=5, backoff=0)
            )
            with pytest.raises(Exception, match="negative"):
                await flaky.ask(-1)
            assert await flaky.ask(1) == 1
            assert await ref.ask(99) == 99  # FIFO: the tells before it are handled

            points = _collect(memory)
            stats = ref.statistics()
            assert stats.mailbox is not None
            echo_id = {"pdc.actor.id": "echo"}
            assert _value(points, "pdc.actor.handled", **echo_id) == stats.handled == 9
            assert _value(points, "pdc.actor.errors", **echo_id) == 0
            assert _value(points, "pdc.mailbox.sent", **echo_id) == stats.mailbox.sent
            assert _value(points, "pdc.mailbox.received", **echo_id) == stats.mailbox.received
            assert _value(points, "pdc.mailbox.capacity", **echo_id) == 8
            assert _value(points, "pdc.mailbox.depth", **echo_id) == 0
            assert _value(points, "pdc.mailbox.dropped", **echo_id) == 0
            flaky_id = {"pdc.actor.id": "flaky"}
            assert _value(points, "pdc.actor.errors", **flaky_id) == 1
            assert _value(points, "pdc.actor.restarts", **flaky_id) == 1
            assert _value(points, "pdc.actor.handled", **flaky_id) == flaky.statistics().handled
            handle.close()
            assert handle.closed
            assert _collect(memory).get("pdc.actor.handled", []) == []


async def test_drops_and_depth_of_a_mailbox_on_its_own(reader) -> None:
    memory, provider = reader
    mailbox: Mailbox[int] = Mailbox(capacity=2, backpressure="drop_oldest", name="inbox")
    with instrument(mailbox, meter_provider=provider):
        for i in range(5):
            await mailbox.send(i)
        points = _collect(memory)
        inbox = {"pdc.mailbox.name": "inbox"}
        assert _value(points, "pdc.mailbox.depth", **inbox) == 2
        assert _value(points, "pdc.mailbox.peak_depth", **inbox) == 2
        assert _value(points, "pdc.mailbox.sent", **inbox) == 5
        assert _value(points, "pdc.mailbox.dropped", **inbox) == 3
        assert _value(points, "pdc.mailbox.rejected", **inbox) == 0
        assert _value(points, "pdc.mailbox.senders_waiting", **inbox) == 0
    mailbox.close()


async def test_ring_counters_of_a_session_and_of_a_kernel_actor(reader) -> None:
    memory, provider = reader
    with anyio.fail_after(LIMIT):
        async with open_persistent_kernel(KERNEL, "cpu") as session:
            with instrument(session, meter_provider=provider):
                for i in range(4):
                    await session.request((i, float(i)))
                await session.request_batch([(9, 1.0), (10, 2.0)])
                points = _collect(memory)
                kernel = {"pdc.kernel.name": "otel_double"}
                stats = session.statistics()
                assert _value(points, "pdc.kernel.ring.sent", **kernel) == stats.sent == 6
                assert _value(points, "pdc.kernel.ring.replied", **kernel) == 6
                assert _value(points, "pdc.kernel.ring.batches", **kernel) == stats.batches
                assert _value(points, "pdc.kernel.ring.unprocessed", **kernel) == 0
                assert _value(points, "pdc.kernel.ring.in_flight", **kernel) == 0
                await session.send((11, 3.0))
                assert _value(_collect(memory), "pdc.kernel.ring.sent", **kernel) == 7
                await session.receive()
                assert _value(_collect(memory), "pdc.kernel.ring.received", **kernel) >= 1

        async with open_nursery() as nursery:
            with instrument(nursery, meter_provider=provider):
                ref = await nursery.start_actor(KERNEL, name="kernel-actor")
                for i in range(3):
                    await ref.ask((i, 1.0))
                points = _collect(memory)
                actor = {"pdc.actor.id": "kernel-actor"}
                assert _value(points, "pdc.actor.handled", **actor) == 3
                both = {"pdc.actor.id": "kernel-actor", "pdc.kernel.name": "otel_double"}
                assert _value(points, "pdc.kernel.ring.sent", **both) == 3
                assert _value(points, "pdc.kernel.ring.replied", **both) == 3


async def _otel_doubler(ctx: Any) -> None:
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.05)
        except TimeoutError:
            continue
        await ctx.send(Response(result=msg.data * 2, correlation_id=msg.message_id))


ring_kernel(kernel_id="otel_doubler", queue_size=64)(_otel_doubler)


async def test_seed_ring_kernels_and_their_latency(reader) -> None:
    memory, provider = reader
    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime(enable_telemetry=True) as runtime:
            with instrument(runtime, meter_provider=provider):
                await runtime.launch("otel_doubler")
                await runtime.activate("otel_doubler")
                for i in range(32):
                    await runtime.send("otel_doubler", Request(data=i))
                for _ in range(32):
                    await runtime.receive("otel_doubler")
                points = _collect(memory)
                telemetry = runtime.get_telemetry("otel_doubler")
                kernel = {"pdc.ring_kernel.id": "otel_doubler"}
                assert _value(points, "pdc.ring_kernel.messages.received", **kernel) == 32
                assert _value(points, "pdc.ring_kernel.messages.processed", **kernel) == 32
                assert _value(points, "pdc.ring_kernel.messages.sent", **kernel) == 32
                assert _value(points, "pdc.ring_kernel.messages.dropped", **kernel) == 0
                assert _value(points, "pdc.ring_kernel.queue.depth", **kernel) == 0
                assert _value(points, "pdc.ring_kernel.errors", **kernel) == 0
                p50 = _value(points, "pdc.ring_kernel.latency", quantile="0.5", **kernel)
                p99 = _value(points, "pdc.ring_kernel.latency", quantile="0.99", **kernel)
                assert p50 == pytest.approx(telemetry.latency_p50_ns / 1e9)
                assert 0 < p50 <= p99 < 1


async def test_each_series_is_observed_once_whatever_covers_it(reader) -> None:
    """Issue 35, item 5: a nursery and one of its actors (or two handles) both observed
    used to report the actor's counters twice (20 after 10 asks), and a monotonic
    counter went down when one of them was closed."""
    memory, provider = reader
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(echo, name="twice")
            kernel_ref = await nursery.start_actor(KERNEL, name="kernel-twice")
            both = instrument(nursery, ref, kernel_ref, meter_provider=provider)
            again = instrument(ref, meter_provider=provider)
            for i in range(10):
                await ref.ask(i)
            await kernel_ref.ask((1, 1.0))
            actor = {"pdc.actor.id": "twice"}
            ring = {"pdc.actor.id": "kernel-twice", "pdc.kernel.name": "otel_double"}
            points = _collect(memory)
            assert [v for a, v in points["pdc.actor.handled"] if a == actor] == [10]
            assert [v for a, v in points["pdc.mailbox.sent"] if a == actor] == [10]
            assert [v for a, v in points["pdc.kernel.ring.sent"] if a == ring] == [1]
            again.close()
            assert _value(_collect(memory), "pdc.actor.handled", **actor) == 10
            both.forget(nursery)
            assert _value(_collect(memory), "pdc.actor.handled", **actor) == 10
            both.close()


def test_every_metric_is_named_and_documented() -> None:
    names = [metric.name for metric in METRICS]
    assert len(set(names)) == len(names)
    guide = (ROOT / "docs" / "guide-telemetry.md").read_text()
    table = set(re.findall(r"^\| `(pdc\.[a-z_.]+)` \|", guide, flags=re.MULTILINE))
    assert table == set(names)
    for metric in METRICS:
        assert metric.name.startswith("pdc.")
        assert metric.instrument in ("counter", "gauge")
        assert metric.description


def test_instruments_are_created_once_per_provider(reader) -> None:
    memory, provider = reader
    first = instrument(meter_provider=provider)
    second = instrument(meter_provider=provider)
    mailbox: Mailbox[int] = Mailbox(capacity=4, name="shared")
    first.observe(mailbox)
    second.observe(mailbox)  # observed twice, reported once
    mailbox.send_nowait(1)
    (point,) = _collect(memory)["pdc.mailbox.sent"]
    assert point == ({"pdc.mailbox.name": "shared"}, 1)
    first.forget(mailbox)
    assert len(_collect(memory)["pdc.mailbox.sent"]) == 1
    second.close()
    assert _collect(memory).get("pdc.mailbox.sent", []) == []
    with pytest.raises(RuntimeError, match="closed"):
        second.observe(mailbox)
    first.close()
    mailbox.close()


def test_what_it_cannot_read_is_a_type_error(reader) -> None:
    _, provider = reader
    handle = instrument(meter_provider=provider)
    assert isinstance(handle, Instrumentation)
    with pytest.raises(TypeError, match="cannot read counters from 42"):
        handle.observe(42)
    with pytest.raises(TypeError, match="give it an actor nursery"):
        instrument("nursery", meter_provider=provider)
    handle.close()


def test_the_core_imports_and_runs_without_opentelemetry() -> None:
    """With ``opentelemetry`` unimportable, pdc works and never tries to import it;
    ``instrument`` says which extra to install."""
    program = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ImportError(f"blocked: {name}", name=name)

        sys.meta_path.insert(0, Block())
        import anyio
        import pdc_core
        import pdc_core.telemetry
        from pdc_core import open_nursery

        async def echo(message):
            return message

        async def main():
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(echo)
                assert await ref.ask(3) == 3

        anyio.run(main)
        assert not any(m.split(".")[0] == "opentelemetry" for m in sys.modules), "imported"
        try:
            pdc_core.telemetry.instrument()
        except ImportError as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "pdc_core.telemetry needs the OpenTelemetry API: pip install 'pdc-core[otel]'"
    )
