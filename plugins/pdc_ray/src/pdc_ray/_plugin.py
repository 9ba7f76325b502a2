"""pdc-ray's ``pdc`` plugin: the ``ray`` placement (``pdc demo --placement ray``) and
the Ray section of ``pdc info``.

Loaded through the ``pdc`` entry-point group by every ``pdc`` command, so importing
it imports no Ray: :func:`cluster_report` imports Ray only when a cluster is running
and answers, and :func:`open_demo_placement` only when it is used.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdc_core.backend import hookimpl

if TYPE_CHECKING:
    from ._placement import RayPlacement

__all__ = [
    "address_file",
    "cluster_report",
    "find_cluster",
    "open_demo_placement",
    "pdc_register_info",
    "pdc_register_placements",
]

#: How long ``pdc info`` waits for a recorded cluster's address to accept a connection.
PROBE_TIMEOUT = 1.0


def address_file() -> Path:
    """Where ``ray start`` records the address of the cluster it started (as Ray
    itself looks it up: ``$RAY_TMPDIR``, else ``$TMPDIR`` on Linux, else ``/tmp``)."""
    base = os.environ.get("RAY_TMPDIR")
    if base is None and sys.platform.startswith("linux"):
        base = os.environ.get("TMPDIR")
    if base is None:
        on_posix = sys.platform.startswith(("linux", "darwin"))
        base = os.path.join(os.sep, "tmp") if on_posix else tempfile.gettempdir()
    return Path(base) / "ray" / "ray_current_cluster"


def find_cluster() -> str | None:
    """The address of a running Ray cluster this machine is pointed at, without
    importing Ray: ``RAY_ADDRESS`` when set (``"local"`` and ``"auto"`` name none), else
    the address ``ray start`` recorded. ``None`` when there is none. A Ray started by
    ``ray.init()`` inside another program (a test run, a notebook) is never found:
    it is that program's own."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address:
        return None if address in ("local", "auto") else address
    try:
        recorded = address_file().read_text().strip()
    except OSError:
        return None
    return recorded or None


def _probe(address: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """``None`` if something accepts a TCP connection at ``address`` (``host:port``,
    ``ray://host:port`` too), else why not."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        number = int(port)
    except ValueError:
        return f"{address!r} is not a host:port address"
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", number), timeout):
            return None
    except OSError as exc:
        return f"nothing answers at {address} ({exc.strerror or exc})"


def _describe(ray: Any, address: str) -> dict[str, Any]:
    nodes = [node for node in ray.nodes() if node.get("Alive")]

    def own(resources: dict[str, float]) -> dict[str, float]:
        # "node:<ip>" resources name the nodes, one unit each: noise here.
        return {k: v for k, v in sorted(resources.items()) if not k.startswith("node:")}

    return {
        "status": "connected",
        "address": address,
        "nodes": len(nodes),
        "resources": own(ray.cluster_resources()),
        "available": own(ray.available_resources()),
    }


def cluster_report() -> dict[str, Any]:
    """``pdc info``'s Ray section: the cluster's resources when one is running and
    reachable, else ``status: not connected`` and why. Never starts a cluster; imports
    Ray only to connect to one that answers, and disconnects before returning."""
    loaded = sys.modules.get("ray")
    if loaded is not None and loaded.is_initialized():
        return _describe(loaded, "this process's Ray connection")
    address = find_cluster()
    if address is None:
        return {
            "status": "not connected",
            "why": "no running Ray cluster found (RAY_ADDRESS is unset and none was "
            "started with `ray start --head`)",
        }
    problem = _probe(address)
    if problem is not None:
        return {"status": "not connected", "address": address, "why": problem}
    import ray

    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as exc:
        return {"status": "not connected", "address": address, "why": f"ray.init failed: {exc}"}
    try:
        return _describe(ray, address)
    finally:
        ray.shutdown()  # a driver connected to a cluster: disconnects, stops nothing


@asynccontextmanager
async def open_demo_placement() -> AsyncIterator[RayPlacement]:
    """The ``ray`` placement of ``pdc demo --placement ray``: one CPU in a Ray worker.

    Uses this process's Ray connection if there is one, else joins the running
    cluster :func:`find_cluster` finds (if it answers), else starts a local Ray
    (no dashboard) for the block and shuts it down after: :func:`pdc_ray.connect`.
    """
    import pdc_ray  # its names load on first use: only when this placement is used

    address = find_cluster()
    options: dict[str, Any]
    if address is not None and _probe(address) is None:
        options = {"address": address}
    else:
        options = {"address": "local", "include_dashboard": False}
    async with pdc_ray.connect(log_to_driver=False, logging_level=logging.ERROR, **options):
        yield pdc_ray.on(num_cpus=1)


@hookimpl
def pdc_register_placements(register: Callable[..., None]) -> None:
    register(
        "ray",
        open_demo_placement,
        "a Ray worker process (pdc_ray.on(num_cpus=1)); starts a local Ray for the run "
        "unless a cluster is running",
    )


@hookimpl
def pdc_register_info(register: Callable[..., None]) -> None:
    register("ray", cluster_report, "Ray cluster")
