"""pdc-ray in the ``pdc`` command without Ray running: ``pdc plugins`` lists it, and
``pdc info`` says "not connected" without importing Ray when no cluster answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from pdc_core import list_plugins


def pdc(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -X importtime -m pdc_core ARGV`` with ``env`` (RAY_ADDRESS and
    PDC_PLUGINS unset unless given); its stderr lists every module imported."""
    environ = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PDC_PLUGINS")}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pdc_core", *argv],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def imported(done: subprocess.CompletedProcess[str]) -> set[str]:
    """The top-level packages a ``pdc`` run imported (from ``-X importtime``)."""
    return {
        line.rpartition("|")[2].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }


def ray_report(tmp_path: Path, **env: str) -> tuple[dict[str, Any], set[str]]:
    # RAY_TMPDIR: where `ray start` would have recorded a cluster's address.
    done = pdc("info", "--json", RAY_TMPDIR=str(tmp_path), **env)
    section = json.loads(done.stdout)["sections"]["ray"]
    assert section["title"] == "Ray cluster"
    return section["report"], imported(done)


def test_pdc_plugins_lists_pdc_ray() -> None:
    (info,) = (info for info in list_plugins() if info.distribution == "pdc-ray")
    assert info.loaded, info.error
    assert info.placements == ["ray"]
    assert info.info_sections == ["ray"]
    done = pdc("plugins")
    assert "ray  (pdc-ray " in done.stdout
    assert "  placements: ray\n" in done.stdout
    assert "  backends: cpu\n" in done.stdout  # backends are listed as before
    assert "ray" not in imported(done)
    assert "pdc_ray" in imported(done)


def test_pdc_info_without_a_cluster_is_not_connected_and_imports_no_ray(tmp_path: Path) -> None:
    report, modules = ray_report(tmp_path)
    assert "ray" not in modules
    assert report["status"] == "not connected"
    assert "no running Ray cluster found" in report["why"]
    text = pdc("info", RAY_TMPDIR=str(tmp_path)).stdout
    assert "Ray cluster (from pdc-ray " in text
    assert "  status: not connected\n" in text


def test_pdc_info_with_a_stale_or_bad_address_is_not_connected(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}")
    report, modules = ray_report(tmp_path)
    assert "ray" not in modules
    assert report["status"] == "not connected"
    assert report["address"] == f"127.0.0.1:{port}"
    assert "nothing answers at" in report["why"]
    report, _ = ray_report(tmp_path, RAY_ADDRESS="no-port-here")
    assert "is not a host:port address" in report["why"]
    report, _ = ray_report(tmp_path, RAY_ADDRESS="local")  # names no running cluster
    assert report["status"] == "not connected"
