"""``pdc demo``: real-time anomaly detection over a synthetic sensor stream.

The pipeline, all inside ONE actor nursery::

    producer (nursery body) --tell--> feature actor --tell--> detector actor --tell--> sink

* The **producer** generates sensor *frames* (``FRAME`` float32 samples each: a slow
  baseline drift plus unit Gaussian noise), deterministically from ``--seed``, and
  plants anomalies (one large spike in a frame) in a known set of frames. Each frame
  is one message.
* The **feature actor** receives frames in batches (``handle_batch``: every frame
  waiting, up to ``max_batch``) and computes one score per frame on the chosen backend:
  the largest deviation from the frame's median. :func:`start_feature_stage` is the
  one place that decides *how* features are computed (today a batched NumPy actor;
  a persistent kernel slots in there). With ``--placement NAME`` (a placement a plugin
  registers, such as pdc-ray's ``ray``) the scoring runs in a :class:`ScoreActor` at
  that placement (a Ray worker process), which the feature actor asks once per batch.
* The **detector actor** flags frames whose score exceeds the threshold.
* The **sink actor** records per-frame latency (producer send -> sink) and the frames
  flagged, and reports progress.

Guarantees: the result is deterministic for a seed (the same frames, the same planted
anomalies); the spikes are at least 12 sigma and the threshold 8 sigma, so the found set
equals the planted set exactly; cancelling :func:`run_demo` (Ctrl-C) stops every actor,
leaves no task or thread behind, and leaves a consistent partial :class:`DemoResult`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import anyio
import numpy as np
import numpy.typing as npt

from .._actors import Actor, ActorNursery, ActorRef, open_nursery
from .._exceptions import ActorStopped, PluginError
from .._loop import current_library
from .._persistent import KernelActorRef, PersistentKernelActor
from .._plugins import get_backend, registered_placements
from ..backend import Backend, Capability, PersistentKernel
from ._options import check_async_backend, check_backend, usage_error
from ._running import announce_once, only_interrupts

__all__ = [
    "ANOMALY_RATE",
    "CHUNK",
    "CUDA_SCORE_BODY",
    "DEFAULT_MESSAGES",
    "FEATURE_KERNEL",
    "FEATURE_REPLY",
    "FEATURE_REQUEST",
    "FRAME",
    "SPIKE_MAX",
    "SPIKE_MIN",
    "THRESHOLD",
    "DemoConfig",
    "DemoResult",
    "Detections",
    "DetectorActor",
    "DemoPlacement",
    "FeatureActor",
    "FeatureBatch",
    "FeatureStage",
    "Frame",
    "ScoreActor",
    "Scorer",
    "SinkActor",
    "actor_scorer",
    "add_arguments",
    "check_placement",
    "host_scorer",
    "latency_measures",
    "kernel_scorer",
    "mlx_score_records",
    "numpy_scores",
    "open_placement",
    "run",
    "run_demo",
    "score_records",
    "start_feature_stage",
    "synthetic_stream",
    "uses_persistent_kernel",
]

#: Samples per sensor frame.
FRAME: Final = 32
#: Frames produced (and sent with one ``tell_many``) at a time.
CHUNK: Final = 512
#: Default number of frames (messages): a few seconds on the CPU backend.
DEFAULT_MESSAGES: Final = 500_000
#: Score above which a frame is anomalous (noise is N(0, 1)).
THRESHOLD: Final = 8.0
#: Planted spikes have a magnitude in [SPIKE_MIN, SPIKE_MAX) sigma.
SPIKE_MIN: Final = 12.0
SPIKE_MAX: Final = 20.0
#: Fraction of frames with a planted anomaly.
ANOMALY_RATE: Final = 0.001


# -- the stream ------------------------------------------------------------------------------


class Frame(NamedTuple):
    """One sensor frame: a message of the pipeline."""

    frame_id: int
    samples: npt.NDArray[np.float32]
    sent_ns: int


@dataclass(frozen=True)
class DemoConfig:
    """What to run. ``backend=None`` means the default backend."""

    messages: int = DEFAULT_MESSAGES
    backend: str | None = None
    seed: int = 0
    threshold: float = THRESHOLD
    anomaly_rate: float = ANOMALY_RATE
    #: A placement registered by a plugin (``"ray"``): where the feature stage scores.
    placement: str | None = None
    #: Frames per second the producer sends at (``None``: as fast as the pipeline takes
    #: them, queues full).
    rate: float | None = None

    def __post_init__(self) -> None:
        if self.rate is not None and (
            isinstance(self.rate, bool)
            or not isinstance(self.rate, (int, float))
            or not math.isfinite(self.rate)
            or self.rate <= 0
        ):
            raise ValueError(
                f"rate must be a positive number of frames per second, not {self.rate!r}"
            )
        if self.placement is not None and (
            not isinstance(self.placement, str) or not self.placement
        ):
            raise ValueError(f"placement must be a non-empty name, got {self.placement!r}")
        if self.messages < 1:
            raise ValueError(f"messages must be at least 1, got {self.messages}")
        if not 0 <= self.anomaly_rate <= 1:
            raise ValueError(f"anomaly_rate must be in [0, 1], got {self.anomaly_rate}")

    def planted(self) -> npt.NDArray[np.int64]:
        """The sorted ids of the frames that carry an anomaly."""
        rng = np.random.default_rng([self.seed, 0])
        count = max(1, round(self.messages * self.anomaly_rate)) if self.anomaly_rate else 0
        count = min(count, self.messages)
        return np.sort(rng.choice(self.messages, size=count, replace=False)).astype(np.int64)


def synthetic_stream(
    config: DemoConfig,
) -> Iterator[tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]]:
    """Yield ``(frame_ids, frames)`` chunks: frames of shape ``(n, FRAME)``, float32.

    Deterministic for ``config.seed``; the frames listed by ``config.planted()`` have
    one spike of ``SPIKE_MIN``..``SPIKE_MAX`` sigma, with a random sign and position.
    """
    planted = config.planted()
    for chunk_index, start in enumerate(range(0, config.messages, CHUNK)):
        stop = min(start + CHUNK, config.messages)
        rng = np.random.default_rng([config.seed, 1, chunk_index])
        ids = np.arange(start, stop, dtype=np.int64)
        drift = 5.0 * np.sin(2 * np.pi * ids / 5000.0)
        frames = (drift[:, None] + rng.standard_normal((stop - start, FRAME))).astype(np.float32)
        lo, hi = np.searchsorted(planted, [start, stop])
        for frame_id in planted[lo:hi]:
            position = int(rng.integers(FRAME))
            sign = 1.0 if rng.random() < 0.5 else -1.0
            frames[frame_id - start, position] += sign * rng.uniform(SPIKE_MIN, SPIKE_MAX)
        yield ids, frames


# -- the result -------------------------------------------------------------------------------


def latency_measures(rate: float | None) -> str:
    """What the demo's latency is: a frame's time from its send to the sink, queueing
    included, at full rate (queues full) or paced at ``rate`` frames per second."""
    if rate is None:
        return "end to end at full rate, queueing included"
    return f"end to end, paced at {rate:,.6g} frames/s, queueing included"


@dataclass
class DemoResult:
    """What the demo measured; consistent (if partial) after a cancellation."""

    backend: str
    async_backend: str
    feature_stage: str = ""
    placement: str | None = None
    requested: int = 0
    sent: int = 0
    processed: int = 0
    planted: set[int] = field(default_factory=set)
    found: set[int] = field(default_factory=set)
    latencies_ns: list[npt.NDArray[np.int64]] = field(default_factory=list)
    started: float | None = None
    finished: float | None = None
    interrupted: bool = False
    #: When the run began: before the placement opened and the actors started.
    began: float | None = None
    #: Frames per second the producer was paced at (``None``: full rate).
    rate: float | None = None

    @property
    def elapsed(self) -> float:
        """Seconds from the first frame sent to the last one processed (or now)."""
        if self.started is None:
            return 0.0
        end = self.finished if self.finished is not None else time.perf_counter()
        return end - self.started

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary. Planted anomalies count only among frames processed."""
        latencies = (
            np.concatenate(self.latencies_ns) if self.latencies_ns else np.empty(0, np.int64)
        )

        def pct(q: float) -> float | None:
            return float(np.percentile(latencies, q)) / 1e3 if latencies.size else None

        elapsed = self.elapsed
        setup = (
            self.started - self.began
            if self.began is not None and self.started is not None
            else None
        )
        planted = self.planted
        if self.interrupted:
            # Frames are processed in order per stage, so the ones processed are the
            # lowest ids; compare only over those.
            planted = {i for i in planted if i < self.processed}
        return {
            "backend": self.backend,
            "async_backend": self.async_backend,
            "feature_stage": self.feature_stage,
            "placement": self.placement,
            "messages_requested": self.requested,
            "messages_sent": self.sent,
            "messages_processed": self.processed,
            "elapsed_s": elapsed,
            # Opening the placement (a Ray start), starting the actors and making the
            # kernel resident: before the first frame, not in elapsed_s.
            "setup_s": setup,
            "rate_per_s": self.rate,
            "latency_measures": latency_measures(self.rate),
            "throughput_msgs_per_s": self.processed / elapsed if elapsed > 0 else None,
            "latency_p50_us": pct(50),
            "latency_p99_us": pct(99),
            "anomalies_planted": len(planted),
            "anomalies_found": len(self.found),
            "anomalies_match": planted == self.found,
            "missed": sorted(planted - self.found)[:20],
            "false_alarms": sorted(self.found - planted)[:20],
            "interrupted": self.interrupted,
        }


# -- the actors -------------------------------------------------------------------------------


class FeatureBatch(NamedTuple):
    frame_ids: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float32]
    sent_ns: npt.NDArray[np.int64]


class Detections(NamedTuple):
    frame_ids: npt.NDArray[np.int64]
    anomalous: npt.NDArray[np.int64]
    sent_ns: npt.NDArray[np.int64]


def numpy_scores(frames: Any, xp: Any = np) -> Any:
    """Score each frame: the largest absolute deviation from the frame's median.

    ``xp`` is the array module: NumPy (the host actor and the cpu kernel body) or
    ``mlx.core`` (the metal kernel body): the one definition of the math. The median of
    the even-length frame is the mean of its two middle samples, as ``np.median``'s.
    """
    ordered = xp.sort(frames, axis=1)
    half = FRAME // 2
    median = (ordered[:, half - 1 : half] + ordered[:, half : half + 1]) * 0.5
    return xp.max(xp.abs(frames - median), axis=1)


# -- the feature kernel -----------------------------------------------------------------------

#: A request slot of the feature kernel: one frame.
FEATURE_REQUEST: Final = np.dtype([("frame_id", "<u8"), ("samples", "<f4", (FRAME,))], align=True)
#: A reply slot: the frame's score.
FEATURE_REPLY: Final = np.dtype([("frame_id", "<u8"), ("score", "<f4")], align=True)


def score_records(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The feature kernel's ``cpu`` body: :func:`numpy_scores` over a batch of records."""
    replies = np.empty(len(requests), FEATURE_REPLY)
    replies["frame_id"] = requests["frame_id"]
    replies["score"] = numpy_scores(requests["samples"])
    return replies


def mlx_score_records(requests: Mapping[str, Any]) -> dict[str, Any]:
    """The feature kernel's ``metal`` body: :func:`numpy_scores` with MLX operations
    over the request fields (pdc_metal's convention: a dict of MLX arrays in and out)."""
    import mlx.core as mx

    return {"frame_id": requests["frame_id"], "score": numpy_scores(requests["samples"], mx)}


#: The feature kernel's ``cuda`` body (pdc_cuda's contract: one thread per request).
#: The same math as :func:`numpy_scores`: the median of the frame (the mean of the two
#: middle samples, FRAME being even), then the largest absolute deviation from it.
CUDA_SCORE_BODY: Final = f"""
#define PDC_FRAME {FRAME}
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {{
    float sorted[PDC_FRAME];
    for (int i = 0; i < PDC_FRAME; ++i) {{
        float value = request.samples[i];
        int j = i;
        for (; j > 0 && sorted[j - 1] > value; --j) sorted[j] = sorted[j - 1];
        sorted[j] = value;
    }}
    const float median = 0.5f * (sorted[PDC_FRAME / 2 - 1] + sorted[PDC_FRAME / 2]);
    float score = 0.0f;
    for (int i = 0; i < PDC_FRAME; ++i) score = fmaxf(score, fabsf(request.samples[i] - median));
    reply.frame_id = request.frame_id;
    reply.score = score;
    return 0;
}}
"""

#: The feature stage as a persistent kernel: a frame in, its score out.
FEATURE_KERNEL: Final = PersistentKernel(
    "demo_features",
    FEATURE_REQUEST,
    FEATURE_REPLY,
    capacity=2 * CHUNK,
    max_batch=CHUNK,
    bodies={"cpu": score_records, "cuda": CUDA_SCORE_BODY, "metal": mlx_score_records},
)


async def _forward(ref: ActorRef[Any, None], message: Any) -> None:
    """Tell the next stage; a stage stopped by a cancellation ends the pipeline quietly.

    In a normal run the stages stop in pipeline order, each after draining, so a
    downstream stage is never stopped while an upstream one still forwards.
    """
    with contextlib.suppress(ActorStopped):
        await ref.tell(message)


Scorer = Callable[
    [npt.NDArray[np.int64], npt.NDArray[np.float32]], Awaitable[npt.NDArray[np.float32]]
]


class FeatureActor(Actor[Frame, None]):
    """Scores frames in batches (every frame waiting, up to ``max_batch``, at once).

    ``score(frame_ids, frames)`` computes the batch's scores: on the host
    (:func:`host_scorer`) or on a persistent kernel (:func:`kernel_scorer`). A batch is
    forwarded to the detector only after its scores came back, and the next batch is
    taken only then: the bounded mailbox in front of this actor is the backpressure
    toward the producer, and frames stay in order.
    """

    def __init__(self, score: Scorer, detector: ActorRef[FeatureBatch, None]) -> None:
        self._score = score
        self._detector = detector

    async def handle_batch(self, messages: list[Frame]) -> list[None]:
        count = len(messages)
        ids = np.fromiter((m.frame_id for m in messages), np.int64, count)
        sent = np.fromiter((m.sent_ns for m in messages), np.int64, count)
        frames = np.stack([m.samples for m in messages])
        scores = await self._score(ids, frames)
        await _forward(self._detector, FeatureBatch(ids, scores, sent))
        return [None] * count


def host_scorer() -> Scorer:
    """Score with :func:`numpy_scores` in the actor's own task (host memory)."""

    async def score(
        frame_ids: npt.NDArray[np.int64], frames: npt.NDArray[np.float32]
    ) -> npt.NDArray[np.float32]:
        scores: npt.NDArray[np.float32] = numpy_scores(frames)
        return scores

    return score


def kernel_scorer(kernel: KernelActorRef) -> Scorer:
    """Score on a persistent kernel: one ``ask_batch`` (ring write + replies) per batch."""

    async def score(
        frame_ids: npt.NDArray[np.int64], frames: npt.NDArray[np.float32]
    ) -> npt.NDArray[np.float32]:
        requests = np.empty(len(frame_ids), FEATURE_REQUEST)
        requests["frame_id"] = frame_ids
        requests["samples"] = frames
        replies = await kernel.ask_batch(requests)
        if not np.array_equal(replies["frame_id"], requests["frame_id"]):
            raise RuntimeError("the feature kernel answered other frames than it was sent")
        scores: npt.NDArray[np.float32] = replies["score"]
        return scores

    return score


class ScoreActor(Actor[tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]], Any]):
    """The feature stage's math as an actor of its own, for a placement elsewhere (a
    Ray worker): ``(frame_ids, frames)`` in, :func:`numpy_scores` of the frames out.

    It holds no reference to the other stages (refs to local actors do not travel), so
    the local :class:`FeatureActor` asks it once per batch and forwards the scores.
    """

    async def handle(
        self, message: tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]
    ) -> npt.NDArray[np.float32]:
        frame_ids, frames = message
        if len(frame_ids) != len(frames):
            raise ValueError(f"{len(frame_ids)} frame ids for {len(frames)} frames")
        scores: npt.NDArray[np.float32] = numpy_scores(frames)
        return scores


def actor_scorer(ref: ActorRef[Any, Any]) -> Scorer:
    """Score by asking a :class:`ScoreActor` (wherever it runs): one ``ask`` per batch."""

    async def score(
        frame_ids: npt.NDArray[np.int64], frames: npt.NDArray[np.float32]
    ) -> npt.NDArray[np.float32]:
        scores: npt.NDArray[np.float32] = await ref.ask((frame_ids, frames))
        if len(scores) != len(frame_ids):
            raise RuntimeError(f"the scorer answered {len(scores)} scores for {len(frame_ids)}")
        return scores

    return score


class DetectorActor(Actor[FeatureBatch, None]):
    """Flags the frames whose score exceeds the threshold."""

    def __init__(self, threshold: float, sink: ActorRef[Detections, None]) -> None:
        self._threshold = threshold
        self._sink = sink

    async def handle(self, message: FeatureBatch) -> None:
        anomalous = message.frame_ids[message.scores > self._threshold]
        await _forward(self._sink, Detections(message.frame_ids, anomalous, message.sent_ns))


class SinkActor(Actor[Detections, None]):
    """Records latencies and detections into a :class:`DemoResult`."""

    def __init__(self, result: DemoResult, on_progress: Callable[[int], None] | None) -> None:
        self._result = result
        self._on_progress = on_progress

    async def handle(self, message: Detections) -> None:
        result = self._result
        result.latencies_ns.append(time.perf_counter_ns() - message.sent_ns)
        result.found.update(int(i) for i in message.anomalous)
        result.processed += len(message.frame_ids)
        result.finished = time.perf_counter()
        if self._on_progress is not None:
            self._on_progress(result.processed)


@dataclass(frozen=True)
class FeatureStage:
    """The feature stage as started: where frames go, what to stop, what it is.

    ``entry`` takes ``tell(Frame)``/``tell_many``; ``stop_order`` lists the stage's
    actors in the order they must stop (each after draining) so nothing is in flight.
    """

    entry: ActorRef[Frame, None]
    stop_order: tuple[ActorRef[Any, Any], ...]
    description: str
    persistent: bool


@dataclass(frozen=True)
class DemoPlacement:
    """A placement opened for the run: its registered ``name`` and the ``placement``
    object that ``start_actor(placement=...)`` takes."""

    name: str
    placement: Any


def check_placement(name: str | None, command: str) -> int:
    """0 if ``name`` is ``None`` or a placement a plugin registered, else a usage error."""
    if name is None:
        return 0
    registered = registered_placements()
    if name.lower() in registered:
        return 0
    choices = ", ".join(repr(v) for v in sorted(registered)) or "none is installed"
    hint = " (pip install pdc-ray for 'ray')" if not registered or name.lower() == "ray" else ""
    return usage_error(
        command, f"argument --placement: invalid choice: {name!r} (choose from {choices}){hint}"
    )


@contextlib.asynccontextmanager
async def open_placement(name: str) -> AsyncIterator[DemoPlacement]:
    """Open the placement a plugin registered as ``name`` for the block.

    Raises :class:`LookupError` naming the registered placements for an unknown name,
    and :class:`~pdc_core.PluginError` (chained) when the plugin's opener fails before
    it yields; what the placement raises while opening (a cluster that does not
    start) propagates as it is.
    """
    registered = registered_placements()
    registration = registered.get(name.lower())
    if registration is None:
        names = ", ".join(sorted(registered)) or "none"
        raise LookupError(f"no plugin registers a placement named {name!r} (registered: {names})")
    plugin = registration.plugin
    origin = f"plugin {plugin.name!r} ({plugin.distribution or 'unknown distribution'})"
    try:
        manager = registration.target()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a plugin must not end the process
        raise PluginError(
            f"placement {registration.name!r} of {origin} failed to open: {exc!r}"
        ) from exc
    if not isinstance(manager, contextlib.AbstractAsyncContextManager):
        raise PluginError(
            f"placement {registration.name!r} of {origin} returned {manager!r}, "
            "not an async context manager"
        )
    async with manager as placement:
        yield DemoPlacement(registration.name, placement)


def _where(location: object) -> str:
    """`` (pid 123 on 10.0.0.2)`` for a remote ref's ``location``; ``""`` for none."""
    if location is None:
        return ""
    pid, node = getattr(location, "pid", None), getattr(location, "node_ip", None)
    if pid is None:
        return f" ({location})"
    return f" (pid {pid} on {node})" if node else f" (pid {pid})"


def uses_persistent_kernel(backend: Backend) -> bool:
    """Whether the feature stage runs as a persistent kernel on ``backend``."""
    return backend.has(Capability.PERSISTENT_KERNELS) and backend.name in FEATURE_KERNEL.bodies


async def start_feature_stage(
    nursery: ActorNursery,
    backend: Backend,
    detector: ActorRef[FeatureBatch, None],
    placement: DemoPlacement | None = None,
) -> FeatureStage:
    """Start the feature stage on ``backend``: the one place that decides how.

    Where the backend has :attr:`Capability.PERSISTENT_KERNELS` and
    :data:`FEATURE_KERNEL` a body for it: the persistent kernel, resident for the whole
    run, fed by a :class:`FeatureActor` that ships each batch of waiting frames with one
    ``ask_batch`` and forwards the scores to the detector. Elsewhere: the same actor
    scoring each batch with NumPy in its own task. Both keep the ``tell(Frame)``
    interface; stop them in ``stop_order`` (the forwarder drains, then the kernel).

    With a ``placement``: a :class:`ScoreActor` started there (a Ray worker) scores
    each batch, asked by the same :class:`FeatureActor` here.
    """
    if placement is not None:
        scorer = await nursery.start_actor(
            ScoreActor, name="feature-scorer", placement=placement.placement
        )
        entry = await nursery.start_actor(
            FeatureActor(actor_scorer(scorer), detector),
            name="features",
            capacity=4 * CHUNK,
            max_batch=CHUNK,
        )
        where = _where(getattr(scorer, "location", None))
        return FeatureStage(
            entry,
            (entry, scorer),
            f"batched NumPy actor in a {placement.name} worker{where}",
            persistent=False,
        )
    if uses_persistent_kernel(backend):
        runner = PersistentKernelActor(FEATURE_KERNEL, backend, name="feature-kernel")
        await nursery.start_actor(runner)  # returns once the kernel is resident
        kernel = runner.ref
        entry = await nursery.start_actor(
            FeatureActor(kernel_scorer(kernel), detector),
            name="features",
            capacity=4 * CHUNK,
            max_batch=CHUNK,
        )
        return FeatureStage(
            entry,
            (entry, kernel),
            f"persistent kernel on {backend.qualified_name}, "
            f"ring of {FEATURE_KERNEL.capacity} frames",
            persistent=True,
        )
    entry = await nursery.start_actor(
        FeatureActor(host_scorer(), detector), name="features", capacity=4 * CHUNK, max_batch=CHUNK
    )
    why = (
        f"{backend.name} has no persistent-kernel body"
        if backend.has(Capability.PERSISTENT_KERNELS)
        else f"{backend.name} has no persistent kernels"
    )
    return FeatureStage(
        entry,
        (entry,),
        f"batched NumPy actor in host memory ({why})",
        persistent=False,
    )


async def run_demo(
    config: DemoConfig,
    result: DemoResult | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> DemoResult:
    """Run the pipeline inside one actor nursery and return what it measured.

    Pass ``result`` to keep the partial measurements when this is cancelled: the
    cancellation propagates (``result.interrupted`` is set) after every actor stopped.
    """
    backend = get_backend(config.backend)
    if result is None:
        result = DemoResult(backend=backend.qualified_name, async_backend=_async_backend_name())
    result.requested = config.messages
    result.planted = {int(i) for i in config.planted()}
    result.placement = config.placement
    result.rate = config.rate
    result.began = time.perf_counter()
    try:
        async with contextlib.AsyncExitStack() as stack:
            placement = None
            if config.placement is not None:
                placement = await stack.enter_async_context(open_placement(config.placement))
            nursery = await stack.enter_async_context(open_nursery())
            sink = await nursery.start_actor(SinkActor(result, on_progress), name="sink")
            detector = await nursery.start_actor(
                DetectorActor(config.threshold, sink), name="detector"
            )
            stage = await start_feature_stage(nursery, backend, detector, placement)
            result.feature_stage = stage.description
            features = stage.entry
            result.started = time.perf_counter()
            clock = time.perf_counter_ns
            # Paced, frames go out in slices of about a millisecond's worth, each when
            # it is due (start + frames sent / rate): a rate the pipeline keeps up with
            # shows latency without queues filling up.
            step = CHUNK if config.rate is None else max(1, min(CHUNK, int(config.rate // 1000)))
            for ids, frames in synthetic_stream(config):
                for at in range(0, len(ids), step):
                    if config.rate is not None:
                        due = result.started + result.sent / config.rate
                        await anyio.sleep(max(0.0, due - time.perf_counter()))
                    now = clock()
                    await features.tell_many(
                        [
                            Frame(int(i), frame, now)
                            for i, frame in zip(
                                ids[at : at + step], frames[at : at + step], strict=True
                            )
                        ]
                    )
                    result.sent += len(ids[at : at + step])
            # Stop stage by stage, each after it has drained, so nothing is in flight.
            for ref in (*stage.stop_order, detector, sink):
                await ref.stop(drain=True)
    except BaseException:
        result.interrupted = True
        raise
    return result


def _async_backend_name() -> str:
    try:
        return current_library()
    except RuntimeError:
        return "unknown"


# -- the command ------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _rate(text: str) -> float:
    """``--rate``: frames per second, as ``2000``, ``2000/s`` or ``2_000/s``."""
    number = text.strip().removesuffix("/s").replace("_", "")
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a rate: {text!r} (frames per second, such as 2000/s)"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a positive number of frames per second, got {text!r}"
        )
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pdc demo``."""
    parser.add_argument(
        "--backend", help="backend to run on, e.g. cpu or cuda:1 (default: the best available)"
    )
    parser.add_argument(
        "--messages",
        type=_positive_int,
        default=DEFAULT_MESSAGES,
        help=f"number of sensor frames (default {DEFAULT_MESSAGES})",
    )
    parser.add_argument("--async-backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument(
        "--placement",
        metavar="NAME",
        help="run the feature stage's scoring at a placement a plugin registers, "
        "e.g. ray (pdc-ray: a Ray worker, on a local Ray started for the run unless "
        "a cluster is running)",
    )
    parser.add_argument(
        "--rate",
        type=_rate,
        metavar="N/s",
        help="send N frames per second (default: as fast as the pipeline takes them, "
        "so the latency includes full queues); a rate it keeps up with shows the "
        "latency without queueing",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic stream")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    def fmt(value: Any, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    table = Table(title="pdc demo: streaming anomaly detection", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("backend", f"{summary['backend']} ({summary['feature_stage']})")
    table.add_row("async backend", summary["async_backend"])
    table.add_row(
        "messages",
        f"{summary['messages_processed']:,} processed / {summary['messages_sent']:,} sent"
        f" / {summary['messages_requested']:,} requested",
    )
    setup = summary["setup_s"]
    table.add_row(
        "elapsed",
        f"{summary['elapsed_s']:.2f} s streaming"
        + ("" if setup is None else f" (start-up before it, not counted: {setup:.2f} s)"),
    )
    table.add_row("throughput", f"{fmt(summary['throughput_msgs_per_s'], ',.0f')} msgs/s")
    table.add_row(
        "latency",
        f"p50 {fmt(summary['latency_p50_us'], ',.0f')} us,"
        f" p99 {fmt(summary['latency_p99_us'], ',.0f')} us"
        f" ({summary['latency_measures']})",
    )
    match = "[green]exact match[/]" if summary["anomalies_match"] else "[red]MISMATCH[/]"
    table.add_row(
        "anomalies",
        f"{summary['anomalies_found']} found / {summary['anomalies_planted']} planted: {match}",
    )
    if summary["interrupted"]:
        table.add_row("status", "[yellow]interrupted: partial results[/]")
    Console().print(table)


def run(args: argparse.Namespace) -> int:
    """``pdc demo``: run the pipeline, show progress and a summary; 130 on Ctrl-C."""
    status = (
        check_backend(args.backend, "demo")
        or check_async_backend(args.async_backend, "demo")
        or check_placement(args.placement, "demo")
    )
    if status:
        return status
    config = DemoConfig(
        messages=args.messages,
        backend=args.backend,
        seed=args.seed,
        placement=args.placement.lower() if args.placement else None,
        rate=args.rate,
    )
    backend = get_backend(config.backend)
    result = DemoResult(backend=backend.qualified_name, async_backend=args.async_backend)

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=args.json,
    )
    task = progress.add_task(f"frames on {backend.qualified_name}", total=config.messages)

    announce = announce_once("demo", f"on {backend.qualified_name}")

    def on_progress(done: int) -> None:
        announce()  # frames flow
        progress.update(task, completed=done)

    interrupted = False
    with progress:
        try:
            anyio.run(run_demo, config, result, on_progress, backend=args.async_backend)
        except KeyboardInterrupt:
            interrupted = True
        except BaseExceptionGroup as group:
            if not only_interrupts(group):
                raise
            interrupted = True
    result.interrupted = result.interrupted or interrupted
    summary = result.summary()
    if args.json:
        json.dump(summary, sys.stdout, indent=2, default=_json_number)
        sys.stdout.write("\n")
    else:
        _print_summary(summary)
    if result.interrupted:
        print("interrupted: partial results above", file=sys.stderr)
        return 130
    return 0 if summary["anomalies_match"] else 1


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)
