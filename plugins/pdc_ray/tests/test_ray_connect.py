"""``pdc_ray.connect()`` starting its own local Ray, and shutting down only that.

This module runs before the session's shared Ray is started (file order); if Ray is
already up in this process it is skipped, since ``connect`` would then join it.
"""

from __future__ import annotations

import tempfile
import threading

import anyio
import anyio.lowlevel
import pdc_ray
import pytest


def test_connect_starts_ray_in_a_thread_that_outlives_the_start_and_shuts_down_only_that() -> None:
    ray = pytest.importorskip("ray", reason="needs ray (pip install ray)")
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process: connect() would join it")
    temp_dir = tempfile.mkdtemp(prefix="pdc-ray-connect-", dir="/tmp")
    seen: dict[str, object] = {}

    async def main() -> None:
        with anyio.fail_after(60):
            async with pdc_ray.connect(
                address="local",
                num_cpus=1,
                include_dashboard=False,
                _temp_dir=temp_dir,
                log_to_driver=False,
            ) as cluster:
                seen["started"] = cluster.started
                seen["cpus"] = cluster.resources().get("CPU")
                async with pdc_ray.connect() as inner:  # already connected: joins
                    seen["inner_started"] = inner.started
                assert ray.is_initialized()  # the inner block shut nothing down
                # Ray keeps working while the event loop runs on (the daemons belong
                # to connect's own thread, not to a pooled worker thread).
                seen["owner"] = [t.name for t in threading.enumerate() if "pdc-ray" in t.name]
                await anyio.lowlevel.checkpoint()
                seen["nodes"] = len(cluster.nodes())

    anyio.run(main, backend="trio")
    assert seen == {
        "started": True,
        "cpus": 1.0,
        "inner_started": False,
        "owner": ["pdc-ray-owner"],
        "nodes": 1,
    }
    assert not ray.is_initialized()
    assert not [t for t in threading.enumerate() if t.name == "pdc-ray-owner"]
