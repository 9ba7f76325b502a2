"""Host builds planned ahead: every source a test session will need, compiled at once.

A cold cache (a fresh CI clone) compiles each distinct kernel source once: NVRTC's gate,
then ``g++``. Done lazily, each test that needs a new source waits for its build on one
core. :func:`prebuild` compiles a whole list up front on every core instead (``g++``
processes side by side; NVRTC, which serializes its own compilations, overlaps them).
The sources come from :func:`kernel_builds` and :func:`pipeline_builds`, which render
through the cuda backend's own launch path (:func:`pdc_cuda._persistent.render_kernel`),
so a planned source is byte for byte the one the launch compiles -- on a GPU as here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pdc_core import PersistentKernel, PersistentPipeline

from .._kernels import compile_options
from .._persistent import render_kernel
from .._pipeline import link_placement, stage_wirings
from .._ring_source import RingWiring
from ._build import HostBuild, build_ring_kernel

__all__ = ["PlannedBuild", "kernel_builds", "pipeline_builds", "prebuild"]


@dataclass(frozen=True)
class PlannedBuild:
    """One host build to make: a rendered ``source`` with its NVRTC ``options``."""

    source: str = field(repr=False)
    options: tuple[str, ...] = ()
    sanitize: bool = False
    what: str = ""


def kernel_builds(
    kernel: PersistentKernel, *, sanitize: bool = False, **options: Any
) -> list[PlannedBuild]:
    """The build a launch of ``kernel`` on its own compiles (the cuda backend's rings:
    sequenced input), with launch ``options`` as ``open_persistent_kernel`` takes them."""
    _, source, extra = render_kernel(kernel, options, RingWiring(sequenced_input=True))
    return [PlannedBuild(source, compile_options(extra), sanitize, kernel.name)]


def pipeline_builds(
    pipeline: PersistentPipeline, *, sanitize: bool = False, **options: Any
) -> list[PlannedBuild]:
    """The builds a launch of ``pipeline`` on one device compiles, stage by stage (links
    in device memory, as :meth:`pdc_cuda.CudaBackend.launch_pipeline` places them)."""
    count = len(pipeline.stages)
    scopes = [link_placement(0, 0).scope] * (count - 1)
    builds = []
    for stage, wiring in zip(pipeline.stages, stage_wirings(pipeline, scopes, True), strict=True):
        _, source, extra = render_kernel(stage, options, wiring)
        builds.append(PlannedBuild(source, compile_options(extra), sanitize, stage.name))
    return builds


def prebuild(
    builds: Iterable[PlannedBuild],
    *,
    workers: int | None = None,
    also: Sequence[Callable[[], object]] = (),
) -> list[HostBuild]:
    """Build every distinct planned source on ``workers`` threads (the CPU count by
    default), and run each of ``also`` (other builds, such as the TSan driver's) in the
    same pool; cached builds cost a hash. The first failure is raised once every build
    has ended. Returns the builds of ``builds``, distinct ones in order."""
    distinct: dict[tuple[str, tuple[str, ...], bool], PlannedBuild] = {}
    for build in builds:
        distinct.setdefault((build.source, build.options, build.sanitize), build)
    planned: Sequence[PlannedBuild] = list(distinct.values())
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        others = [pool.submit(job) for job in also]
        futures = [
            pool.submit(build_ring_kernel, p.source, options=p.options, sanitize=p.sanitize)
            for p in planned
        ]
        for other in others:
            other.result()
        return [future.result() for future in futures]
