"""The OpenTelemetry side of :mod:`pdc_core.telemetry`: observable instruments whose
callbacks read pdc's counters when a reader collects.

Imported only by :func:`pdc_core.telemetry.instrument`; it is the one module of the core
that imports ``opentelemetry`` (the API only, never the SDK).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import CallbackOptions, Observation

from ._actors import ActorNursery, ActorRef, ActorStatistics, Mailbox, MailboxStatistics
from ._persistent import PersistentKernelSession

if TYPE_CHECKING:
    from .telemetry import Instrumentation, Metric

__all__ = ["Exporter", "exporter_for"]

_Attributes = dict[str, str]
#: One family of counters read from a target: (family, the statistics, attributes).
_Row = tuple[str, Any, _Attributes]

_QUANTILES = (("0.5", "latency_p50_ns"), ("0.95", "latency_p95_ns"), ("0.99", "latency_p99_ns"))


def _ring_in_flight(stats: Any) -> int:
    return max(0, int(stats.sent) - int(stats.replied) - int(stats.unprocessed))


def _dropped(telemetry: Any) -> int:
    return (
        int(telemetry.messages_dropped)
        + int(telemetry.messages_rejected)
        + int(telemetry.messages_discarded)
    )


#: metric name -> (family, what to read from that family's statistics).
_READERS: dict[str, tuple[str, Callable[[Any], float]]] = {
    "pdc.actor.handled": ("actor", lambda s: s.handled),
    "pdc.actor.errors": ("actor", lambda s: s.errors),
    "pdc.actor.restarts": ("actor", lambda s: s.restarts),
    "pdc.actor.skipped": ("actor", lambda s: s.skipped),
    "pdc.mailbox.depth": ("mailbox", lambda s: s.depth),
    "pdc.mailbox.peak_depth": ("mailbox", lambda s: s.peak_depth),
    "pdc.mailbox.capacity": ("mailbox", lambda s: s.capacity),
    "pdc.mailbox.senders_waiting": ("mailbox", lambda s: s.senders_waiting),
    "pdc.mailbox.sent": ("mailbox", lambda s: s.sent),
    "pdc.mailbox.received": ("mailbox", lambda s: s.received),
    "pdc.mailbox.dropped": ("mailbox", lambda s: s.dropped),
    "pdc.mailbox.rejected": ("mailbox", lambda s: s.rejected),
    "pdc.mailbox.discarded": ("mailbox", lambda s: s.discarded),
    "pdc.kernel.ring.sent": ("ring", lambda s: s.sent),
    "pdc.kernel.ring.replied": ("ring", lambda s: s.replied),
    "pdc.kernel.ring.received": ("ring", lambda s: s.received),
    "pdc.kernel.ring.batches": ("ring", lambda s: s.batches),
    "pdc.kernel.ring.unprocessed": ("ring", lambda s: s.unprocessed),
    "pdc.kernel.ring.in_flight": ("ring", _ring_in_flight),
    "pdc.ring_kernel.messages.received": ("ring_kernel", lambda t: t.messages_received),
    "pdc.ring_kernel.messages.processed": ("ring_kernel", lambda t: t.messages_processed),
    "pdc.ring_kernel.messages.sent": ("ring_kernel", lambda t: t.messages_sent),
    "pdc.ring_kernel.messages.dropped": ("ring_kernel", _dropped),
    "pdc.ring_kernel.queue.depth": ("ring_kernel", lambda t: t.queue_depth),
    "pdc.ring_kernel.errors": ("ring_kernel", lambda t: t.error_count),
}


def _is_runtime(target: object) -> bool:
    """A seed ``RingKernelRuntime`` (read through its public telemetry calls)."""
    return callable(getattr(target, "get_all_telemetry", None)) and hasattr(target, "kernel_ids")


def _actor_rows(ref: ActorRef[Any, Any]) -> Iterator[_Row]:
    stats: ActorStatistics = ref.statistics()
    attributes = {"pdc.actor.id": ref.actor_id}
    yield "actor", stats, attributes
    if stats.mailbox is not None:
        yield "mailbox", stats.mailbox, attributes
    session = getattr(ref, "session", None)  # a persistent kernel's actor
    if isinstance(session, PersistentKernelSession):
        yield "ring", session.statistics(), {**attributes, "pdc.kernel.name": session.kernel.name}


def _rows(target: object) -> Iterator[_Row]:
    if isinstance(target, ActorNursery):
        for ref in target.actors.values():
            yield from _actor_rows(ref)
    elif isinstance(target, ActorRef):
        yield from _actor_rows(target)
    elif isinstance(target, Mailbox):
        stats: MailboxStatistics = target.statistics()
        yield "mailbox", stats, {"pdc.mailbox.name": stats.name or "mailbox"}
    elif isinstance(target, PersistentKernelSession):
        yield "ring", target.statistics(), {"pdc.kernel.name": target.kernel.name}
    elif _is_runtime(target):
        telemetry: Mapping[str, Any] = target.get_all_telemetry()  # type: ignore[attr-defined]
        for kernel_id, snapshot in telemetry.items():
            yield "ring_kernel", snapshot, {"pdc.ring_kernel.id": kernel_id}


class Exporter:
    """The instruments of one meter provider, reading every live handle's targets."""

    def __init__(self, meter: otel_metrics.Meter, metrics: Iterable[Metric]) -> None:
        self._handles: weakref.WeakSet[Instrumentation] = weakref.WeakSet()
        self._lock = threading.Lock()
        # One snapshot of every target's counters serves one collection: each target's
        # statistics() is read once per collection, not once per instrument. A callback
        # whose metric was already served from the snapshot starts a new collection.
        self._snapshot: dict[str, list[tuple[Any, _Attributes]]] = {}
        self._served: set[str] | None = None
        for metric in metrics:
            create = (
                meter.create_observable_counter
                if metric.instrument == "counter"
                else meter.create_observable_gauge
            )
            create(
                metric.name,
                callbacks=[self._callback(metric.name)],
                unit=metric.unit,
                description=metric.description,
            )

    def check(self, target: object) -> None:
        """Raise :class:`TypeError` unless pdc can read counters from ``target``."""
        readable = (ActorNursery, ActorRef, Mailbox, PersistentKernelSession)
        if not (isinstance(target, readable) or _is_runtime(target)):
            raise TypeError(
                f"pdc_core.telemetry cannot read counters from {target!r}: give it an actor "
                "nursery, an actor handle, a Mailbox, a PersistentKernelSession or a "
                "RingKernelRuntime"
            )

    def add(self, handle: Instrumentation) -> None:
        with self._lock:
            self._handles.add(handle)

    def remove(self, handle: Instrumentation) -> None:
        with self._lock:
            self._handles.discard(handle)

    def _targets(self) -> list[object]:
        with self._lock:
            handles = list(self._handles)
        seen: set[int] = set()
        targets = []
        for handle in handles:
            for target in handle.targets():
                if id(target) not in seen:  # observed twice, reported once
                    seen.add(id(target))
                    targets.append(target)
        return targets

    def _family(self, name: str, family: str) -> list[tuple[Any, _Attributes]]:
        """The rows of ``family`` for the callback of metric ``name``, from the snapshot of
        the collection under way (taken now if this is the collection's first callback)."""
        targets = None
        with self._lock:
            fresh = self._served is None or name in self._served
        if fresh:
            targets = self._targets()
            snapshot: dict[str, list[tuple[Any, _Attributes]]] = {}
            # A series is observed once however many targets cover it (a nursery and
            # one of its actors, two handles of one actor): reporting it twice would
            # double a counter, and closing one of them would make it go down.
            series: set[tuple[str, frozenset[tuple[str, str]]]] = set()
            for target in targets:
                for row_family, stats, attributes in _rows(target):
                    key = (row_family, frozenset(attributes.items()))
                    if key not in series:
                        series.add(key)
                        snapshot.setdefault(row_family, []).append((stats, attributes))
            with self._lock:
                self._snapshot = snapshot
                self._served = set()
        with self._lock:
            assert self._served is not None
            self._served.add(name)
            return self._snapshot.get(family, [])

    def _callback(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        if name == "pdc.ring_kernel.latency":

            def latency(options: CallbackOptions) -> Iterable[Observation]:
                observations = []
                for snapshot, attributes in self._family(name, "ring_kernel"):
                    if snapshot.latency_count:
                        for quantile, field in _QUANTILES:
                            seconds = float(getattr(snapshot, field)) / 1e9
                            observations.append(
                                Observation(seconds, {**attributes, "quantile": quantile})
                            )
                return observations

            return latency

        family, read = _READERS[name]

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(read(stats), attrs) for stats, attrs in self._family(name, family)]

        return observe


_exporters: weakref.WeakKeyDictionary[Any, Exporter] = weakref.WeakKeyDictionary()
_strong: dict[int, tuple[Any, Exporter]] = {}
_lock = threading.Lock()


def exporter_for(meter_provider: Any, meter_name: str, metrics: Iterable[Metric]) -> Exporter:
    """The exporter of ``meter_provider`` (OpenTelemetry's global one if ``None``),
    creating its instruments the first time: instruments are created once per provider,
    since a second observable instrument of the same name would be refused."""
    from ._version import __version__

    provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
    with _lock:
        try:
            exporter = _exporters.get(provider)
        except TypeError:  # not weakly referenceable
            entry = _strong.get(id(provider))
            exporter = entry[1] if entry is not None and entry[0] is provider else None
        if exporter is None:
            meter = provider.get_meter(meter_name, __version__)
            exporter = Exporter(meter, metrics)
            try:
                _exporters[provider] = exporter
            except TypeError:
                _strong[id(provider)] = (provider, exporter)
        return exporter
