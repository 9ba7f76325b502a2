"""``pdc demo --placement ray`` and ``pdc info`` against the session's real local Ray
(see conftest.py), found through RAY_ADDRESS; nothing is left behind. Skipped when
Ray is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from pdc_ray._plugin import cluster_report


def pdc(ray: Any, *argv: str) -> str:
    """Run ``pdc ARGV`` in another process pointed at the session's Ray."""
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    env.pop("PDC_PLUGINS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pdc_core", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_pdc_demo_scores_in_a_ray_worker(ray_cluster: Any) -> None:
    # Pointed at a running cluster, the demo joins it; without one it starts a local
    # Ray for the run (pdc_ray.connect()).
    out = pdc(ray_cluster, "demo", "--placement", "ray", "--messages", "3000", "--json")
    summary = json.loads(out)
    assert summary["placement"] == "ray"
    assert summary["feature_stage"].startswith("batched NumPy actor in a ray worker (pid ")
    assert summary["messages_processed"] == 3000
    assert summary["anomalies_match"] is True


def test_pdc_info_shows_the_connected_cluster(ray_cluster: Any) -> None:
    report = cluster_report()  # this process is connected: no new connection
    assert report["status"] == "connected"
    assert report["nodes"] == 1
    assert report["resources"]["CPU"] == 2
    assert report["resources"]["accelerator"] == 1
    assert not any(name.startswith("node:") for name in report["resources"])
    assert ray_cluster.is_initialized()

    # Another process finds the cluster through RAY_ADDRESS, connects, reports, leaves.
    out = pdc(ray_cluster, "info")
    address = ray_cluster.get_runtime_context().gcs_address
    assert "Ray cluster (from pdc-ray " in out
    assert "  status: connected\n" in out
    assert f"  address: {address}\n" in out
    assert "    accelerator: 1\n" in out
