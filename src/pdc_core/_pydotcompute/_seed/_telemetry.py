"""Telemetry for ring kernels: real counts, throughput and latency percentiles.

A :class:`KernelTelemetry` recorder lives beside each ring kernel and is updated on
the message path: a few integer increments per message, and, for one message in 8,
two ``perf_counter_ns`` reads for the latency percentiles.
``RingKernelRuntime.get_telemetry`` returns a :class:`Telemetry` snapshot built from
it and from the kernel's mailboxes, so every number in it is a count of something
that happened:

* ``messages_received`` -- messages accepted into the kernel's input queue;
* ``messages_processed`` -- messages the kernel took with ``ctx.receive``;
* ``messages_sent`` -- messages the kernel emitted with ``ctx.send``;
* ``messages_dropped`` / ``messages_rejected`` / ``messages_discarded`` -- input
  messages evicted by the ``"drop_oldest"`` policy, refused by the ``"raise"`` policy,
  or left unprocessed when the kernel terminated;
* ``queue_depth`` / ``output_depth`` -- messages waiting now in each queue;
* ``error_count`` / ``last_error`` -- exceptions that escaped the kernel function;
* ``throughput`` -- ``messages_processed`` per second of *active* time (time spent
  in the ACTIVE or TERMINATING states);
* ``latency_*`` -- from a request entering the input queue to the kernel sending the
  reply whose ``correlation_id`` is the request's ``message_id``; ``queue_wait_*`` --
  from entering the queue to being received by the kernel. Both are measured on a
  1-in-8 sample of the messages (every 8th sent) and the percentiles cover the most
  recent 4096 samples; ``latency_count`` says how many replies were timed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np

__all__ = [
    "MAX_INFLIGHT",
    "WINDOW",
    "KernelTelemetry",
    "LatencyWindow",
    "RingKernelTelemetry",
    "Telemetry",
]

#: Samples kept per latency window.
WINDOW: Final = 4096
#: Request timestamps kept while waiting for their correlated reply.
MAX_INFLIGHT: Final = 65536


class LatencyWindow:
    """The most recent ``size`` samples (nanoseconds), with exact percentiles over them.

    Recording is O(1) with no allocation; percentiles sort a copy on demand.
    """

    __slots__ = ("_i", "_samples", "_size", "count", "max_ns", "min_ns", "total_ns")

    def __init__(self, size: int = WINDOW) -> None:
        self._size = size
        self._samples: list[int] = []
        self._i = 0
        self.count = 0
        self.total_ns = 0
        self.min_ns = 0
        self.max_ns = 0

    def record(self, ns: int) -> None:
        """Add one sample."""
        samples = self._samples
        if len(samples) < self._size:
            samples.append(ns)
        else:
            i = self._i
            samples[i] = ns
            self._i = i + 1 if i + 1 < self._size else 0
        self.count += 1
        self.total_ns += ns
        if ns > self.max_ns:
            self.max_ns = ns
        if ns < self.min_ns or self.count == 1:
            self.min_ns = ns

    def percentiles(self, *qs: float) -> tuple[float, ...]:
        """Percentiles (0..100) of the samples in the window, in ns; 0.0 when empty."""
        if not self._samples:
            return tuple(0.0 for _ in qs)
        return tuple(float(p) for p in np.percentile(np.fromiter(self._samples, np.int64), qs))


class KernelTelemetry:
    """The mutable recorder behind :class:`Telemetry` (one per ring kernel)."""

    __slots__ = (
        "_active_since",
        "_active_total",
        "_inflight",
        "_latency",
        "_queue_wait",
        "created",
        "enabled",
        "error_count",
        "kernel_id",
        "last_error",
        "messages_processed",
        "messages_sent",
    )

    def __init__(self, kernel_id: str, *, enabled: bool = True) -> None:
        self.kernel_id = kernel_id
        self.enabled = enabled
        self.created = time.monotonic()
        self.messages_processed = 0
        self.messages_sent = 0
        self.error_count = 0
        self.last_error: str | None = None
        self._latency: LatencyWindow | None = None
        self._queue_wait: LatencyWindow | None = None
        self._inflight: dict[Any, int] = {}
        self._active_since: float | None = None
        self._active_total = 0.0

    @property
    def latency(self) -> LatencyWindow:
        """Request-to-reply latencies (made at first use: most kernels never time one)."""
        window = self._latency
        if window is None:
            window = self._latency = LatencyWindow()
        return window

    @property
    def queue_wait(self) -> LatencyWindow:
        """Enqueue-to-receive waits (made at first use)."""
        window = self._queue_wait
        if window is None:
            window = self._queue_wait = LatencyWindow()
        return window

    def delivered(self, message: Any, enqueued_ns: int) -> None:
        """A message was received by the kernel (only called when enabled)."""
        self.queue_wait.record(time.perf_counter_ns() - enqueued_ns)
        message_id = getattr(message, "message_id", None)
        if message_id is not None:
            inflight = self._inflight
            if len(inflight) >= MAX_INFLIGHT:
                # A kernel that does not reply with correlation ids: start afresh rather
                # than evict one by one (dict eviction from the front is not O(1)).
                inflight.clear()
            inflight[message_id] = enqueued_ns

    def replied(self, correlation_id: Any) -> None:
        """The kernel sent a reply correlated to a request (only called when enabled)."""
        enqueued_ns = self._inflight.pop(correlation_id, None)
        if enqueued_ns is not None:
            self.latency.record(time.perf_counter_ns() - enqueued_ns)

    def error(self, exc: BaseException) -> None:
        """An exception escaped the kernel function."""
        self.error_count += 1
        self.last_error = f"{type(exc).__name__}: {exc}"

    def set_active(self, active: bool) -> None:
        """Start or stop accumulating active time."""
        now = time.monotonic()
        if active and self._active_since is None:
            self._active_since = now
        elif not active and self._active_since is not None:
            self._active_total += now - self._active_since
            self._active_since = None

    def active_seconds(self) -> float:
        """Seconds spent active so far."""
        total = self._active_total
        if self._active_since is not None:
            total += time.monotonic() - self._active_since
        return total

    def snapshot(
        self,
        state: str,
        *,
        received: int,
        processed: int,
        sent: int,
        dropped: int,
        rejected: int,
        discarded: int,
        queue_depth: int,
        output_depth: int,
        error_count: int,
    ) -> Telemetry:
        """A :class:`Telemetry` of the given counts and this recorder's times and windows.

        The counts come from whoever owns the queues; uptime, active time, the last
        error and the latency and queue-wait percentiles from this recorder (0.0 for a
        window that holds no sample).
        """
        latency = self.latency
        lat50, lat95, lat99 = latency.percentiles(50, 95, 99)
        q50, q95, q99 = self.queue_wait.percentiles(50, 95, 99)
        count = latency.count
        return Telemetry(
            kernel_id=self.kernel_id,
            state=state,
            messages_received=received,
            messages_processed=processed,
            messages_sent=sent,
            messages_dropped=dropped,
            messages_rejected=rejected,
            messages_discarded=discarded,
            queue_depth=queue_depth,
            output_depth=output_depth,
            error_count=error_count,
            last_error=self.last_error,
            uptime_seconds=time.monotonic() - self.created,
            active_seconds=self.active_seconds(),
            latency_count=count,
            avg_latency_ns=latency.total_ns / count if count else 0.0,
            min_latency_ns=latency.min_ns,
            max_latency_ns=latency.max_ns,
            latency_p50_ns=lat50,
            latency_p95_ns=lat95,
            latency_p99_ns=lat99,
            queue_wait_p50_ns=q50,
            queue_wait_p95_ns=q95,
            queue_wait_p99_ns=q99,
        )


@dataclass(frozen=True, slots=True)
class Telemetry:
    """A snapshot of one ring kernel's counters (see the module documentation)."""

    kernel_id: str
    state: str
    messages_received: int
    messages_processed: int
    messages_sent: int
    messages_dropped: int
    messages_rejected: int
    messages_discarded: int
    queue_depth: int
    output_depth: int
    error_count: int
    last_error: str | None
    uptime_seconds: float
    active_seconds: float
    latency_count: int
    avg_latency_ns: float
    min_latency_ns: int
    max_latency_ns: int
    latency_p50_ns: float
    latency_p95_ns: float
    latency_p99_ns: float
    queue_wait_p50_ns: float
    queue_wait_p95_ns: float
    queue_wait_p99_ns: float

    @property
    def throughput(self) -> float:
        """Messages processed per second of active time."""
        if self.active_seconds <= 0:
            return 0.0
        return self.messages_processed / self.active_seconds

    @property
    def avg_latency_ms(self) -> float:
        """Mean request-to-reply latency in milliseconds."""
        return self.avg_latency_ns / 1e6

    @property
    def total_latency_ns(self) -> float:
        """Sum of all request-to-reply latencies recorded."""
        return self.avg_latency_ns * self.latency_count

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as a plain dict (with ``throughput`` included)."""
        data = asdict(self)
        data["throughput"] = self.throughput
        return data


#: The seeds' name for :class:`Telemetry`. (PyDotCompute's ``RingKernelTelemetry``
#: recorder, on the path ``pdc_core.ring_kernels.telemetry``, is another class.)
RingKernelTelemetry = Telemetry
