"""pdc's counters as OpenTelemetry metrics, for the dashboards operators already use.

Install the extra (``pip install "pdc-core[otel]"``, which adds ``opentelemetry-api``
only), then hand pdc's objects to :func:`instrument`::

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter, PeriodicExportingMetricReader,
    )
    from pdc_core.telemetry import instrument

    provider = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(ConsoleMetricExporter())]
    )
    async with open_nursery() as nursery:
        with instrument(nursery, meter_provider=provider):
            ...

Every metric is an *observable* instrument: its callback reads the counters pdc keeps
anyway (:class:`~pdc_core.ActorStatistics`, :class:`~pdc_core.MailboxStatistics`, a
persistent session's statistics, a ring kernel's telemetry) when the reader collects,
so sending, asking and handling messages cost exactly what they cost without it.
Without the extra nothing is imported and nothing is exported: ``import pdc_core`` never
imports OpenTelemetry, and neither does this module until :func:`instrument` is called.
:data:`METRICS` lists every metric: name, instrument, unit, attributes and meaning.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Self

if TYPE_CHECKING:
    from ._otel import Exporter

__all__ = ["METRICS", "Instrumentation", "Metric", "instrument"]

#: The name of the meter pdc's instruments are created on.
_METER_NAME: Final = "pdc"


@dataclass(frozen=True)
class Metric:
    """One metric :func:`instrument` exports: its OpenTelemetry ``name``, the kind of
    observable ``instrument`` (``"counter"`` is monotonic, ``"gauge"`` a current value),
    its ``unit`` (UCUM, as OpenTelemetry's conventions write it), the ``attributes``
    that tell its series apart, and what it counts."""

    name: str
    instrument: Literal["counter", "gauge"]
    unit: str
    attributes: tuple[str, ...]
    description: str


_ACTOR = ("pdc.actor.id",)
#: A mailbox's series: ``pdc.actor.id`` for an actor's, ``pdc.mailbox.name`` for a
#: :class:`~pdc_core.Mailbox` observed on its own.
_MAILBOX = ("pdc.actor.id", "pdc.mailbox.name")
_KERNEL = ("pdc.kernel.name", "pdc.actor.id")
_RING = ("pdc.ring_kernel.id",)

#: Every metric :func:`instrument` exports, in the order of the guide's table.
METRICS: Final[tuple[Metric, ...]] = (
    Metric("pdc.actor.handled", "counter", "{message}", _ACTOR, "messages the actor handled"),
    Metric("pdc.actor.errors", "counter", "{error}", _ACTOR, "exceptions its handler raised"),
    Metric("pdc.actor.restarts", "counter", "{restart}", _ACTOR, "restarts by its policy"),
    Metric("pdc.actor.skipped", "counter", "{message}", _ACTOR, "requests whose caller gave up"),
    Metric("pdc.mailbox.depth", "gauge", "{message}", _MAILBOX, "messages waiting now"),
    Metric("pdc.mailbox.peak_depth", "gauge", "{message}", _MAILBOX, "most messages ever waiting"),
    Metric("pdc.mailbox.capacity", "gauge", "{message}", _MAILBOX, "the mailbox's bound"),
    Metric(
        "pdc.mailbox.senders_waiting", "gauge", "{task}", _MAILBOX, "senders blocked on a full box"
    ),
    Metric("pdc.mailbox.sent", "counter", "{message}", _MAILBOX, "messages accepted"),
    Metric("pdc.mailbox.received", "counter", "{message}", _MAILBOX, "messages taken out"),
    Metric(
        "pdc.mailbox.dropped",
        "counter",
        "{message}",
        _MAILBOX,
        "messages evicted by the drop_oldest policy",
    ),
    Metric(
        "pdc.mailbox.rejected",
        "counter",
        "{message}",
        _MAILBOX,
        "sends refused by the raise policy",
    ),
    Metric(
        "pdc.mailbox.discarded", "counter", "{message}", _MAILBOX, "messages left when it closed"
    ),
    Metric("pdc.kernel.ring.sent", "counter", "{record}", _KERNEL, "requests written to the ring"),
    Metric("pdc.kernel.ring.replied", "counter", "{record}", _KERNEL, "replies read back"),
    Metric(
        "pdc.kernel.ring.received", "counter", "{record}", _KERNEL, "replies taken by receive()"
    ),
    Metric("pdc.kernel.ring.batches", "counter", "{batch}", _KERNEL, "batches the kernel ran"),
    Metric(
        "pdc.kernel.ring.unprocessed",
        "counter",
        "{record}",
        _KERNEL,
        "requests never answered (the kernel stopped or crashed first)",
    ),
    Metric(
        "pdc.kernel.ring.in_flight",
        "gauge",
        "{record}",
        _KERNEL,
        "requests in the ring awaiting their reply",
    ),
    Metric(
        "pdc.ring_kernel.messages.received",
        "counter",
        "{message}",
        _RING,
        "messages accepted into a seed ring kernel's queue",
    ),
    Metric(
        "pdc.ring_kernel.messages.processed",
        "counter",
        "{message}",
        _RING,
        "messages it took with ctx.receive",
    ),
    Metric("pdc.ring_kernel.messages.sent", "counter", "{message}", _RING, "messages it sent"),
    Metric(
        "pdc.ring_kernel.messages.dropped",
        "counter",
        "{message}",
        _RING,
        "input messages evicted, refused or left unprocessed",
    ),
    Metric("pdc.ring_kernel.queue.depth", "gauge", "{message}", _RING, "messages waiting now"),
    Metric("pdc.ring_kernel.errors", "counter", "{error}", _RING, "exceptions out of the kernel"),
    Metric(
        "pdc.ring_kernel.latency",
        "gauge",
        "s",
        (*_RING, "quantile"),
        "request-to-reply latency percentiles (quantile 0.5, 0.95, 0.99) over recent replies",
    ),
)


class Instrumentation:
    """What :func:`instrument` returns: the targets one call reports, until closed.

    ``observe`` adds a target, ``forget`` removes one, ``close`` (or leaving a ``with``
    block) removes them all; the instruments stay on the meter (OpenTelemetry cannot
    remove them) and report nothing for a closed handle. Thread-safe enough for its
    use: the reader's thread only takes a snapshot of the targets.
    """

    def __init__(self, exporter: Exporter) -> None:
        self._exporter = exporter
        self._targets: dict[int, Callable[[], object | None]] = {}
        self._closed = False
        exporter.add(self)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called (the handle then reports nothing)."""
        return self._closed

    def observe(self, target: object) -> None:
        """Report ``target`` from now on (see :func:`instrument` for what it may be).

        Raises :class:`TypeError` for an object pdc cannot read counters from, and
        :class:`RuntimeError` once closed.
        """
        if self._closed:
            raise RuntimeError("this instrumentation is closed; call instrument() again")
        self._exporter.check(target)
        try:
            ref: Callable[[], object | None] = weakref.ref(target)
        except TypeError:  # no weak references to it (a class with __slots__)

            def ref(target: object = target) -> object | None:
                return target

        self._targets[id(target)] = ref

    def forget(self, target: object) -> None:
        """Stop reporting ``target`` (nothing happens if it was not reported)."""
        self._targets.pop(id(target), None)

    def targets(self) -> list[object]:
        """The targets reported now (those still alive)."""
        live = [ref() for ref in list(self._targets.values())]
        return [target for target in live if target is not None]

    def close(self) -> None:
        """Stop reporting anything; idempotent."""
        self._closed = True
        self._targets.clear()
        self._exporter.remove(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def instrument(*targets: Any, meter_provider: Any = None) -> Instrumentation:
    """Export the counters of ``targets`` as OpenTelemetry metrics (see :data:`METRICS`).

    A target is an actor nursery (every actor it has when the reader collects), an
    actor handle (``ActorRef``: a mailbox actor, or a persistent kernel's actor, whose
    ring counters come too), a :class:`~pdc_core.Mailbox`, a
    :class:`~pdc_core.PersistentKernelSession` or a ``RingKernelRuntime`` with
    telemetry enabled (each of its kernels). The instruments are created once per
    meter provider on its meter ``"pdc"`` (``meter_provider`` defaults to
    OpenTelemetry's global one, which exports nothing until an SDK is configured);
    their callbacks read the targets' counters when the provider's readers collect,
    and never touch the message path.

    Returns an :class:`Instrumentation` handle: ``observe(target)`` and
    ``forget(target)`` change what it reports, ``close()`` (or leaving ``with``) stops
    it. Targets are held weakly where they allow it: an object that is gone reports
    nothing. Raises :class:`ImportError` naming the extra when ``opentelemetry-api`` is
    not installed, and :class:`TypeError` for a target it cannot read.
    """
    try:
        from . import _otel
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("opentelemetry"):
            raise
        raise ImportError(
            "pdc_core.telemetry needs the OpenTelemetry API: pip install 'pdc-core[otel]'",
            name=exc.name,
        ) from exc
    handle = Instrumentation(_otel.exporter_for(meter_provider, _METER_NAME, METRICS))
    try:
        for target in targets:
            handle.observe(target)
    except BaseException:
        handle.close()
        raise
    return handle
