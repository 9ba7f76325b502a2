"""Fixtures of pdc-ray's tests.

The real-Ray tests share one local Ray per test session, started here with its own
temporary directory (``address="local"``: never someone else's cluster), 2 CPUs, no
dashboard and one custom ``accelerator`` resource standing in for a GPU. After every
test that used it, ``ray_cluster`` checks that the test left no Ray actor alive and
no host worker process behind. Without Ray installed those tests are skipped.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: How long the leak check waits for Ray to reap what a test killed.
REAP_TIMEOUT = 10.0


def _host_processes() -> list[str]:
    """Command lines of the Ray worker processes hosting a pdc actor that descend from
    this process (Ray's daemons and workers are its children here; another test run's
    are not)."""
    parents: dict[int, int] = {}
    titles: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            titles[int(entry.name)] = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            )
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    ours = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in ours and pid not in ours:
                ours.add(pid)
                grew = True
    return [f"{pid}: {titles[pid]}" for pid in sorted(ours) if "RayHost" in titles.get(pid, "")]


def _live_actors(ray: Any) -> list[str]:
    from ray._private import state  # the GCS view; the public state API needs a dashboard

    return [
        f"{actor_id} {info.get('ActorClassName', '?')} {info['State']}"
        for actor_id, info in state.actors().items()
        if info["State"] != "DEAD"
    ]


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="pdc-ray's real-Ray tests need ray (pip install ray)")
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; these tests start their own")
    temp_dir = tempfile.mkdtemp(prefix="pdc-ray-", dir="/tmp")
    tests = str(Path(__file__).parent)
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        resources={"accelerator": 1},
        _temp_dir=temp_dir,
        log_to_driver=False,
        # The test modules' actors are importable by the workers too.
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([tests, *sys.path])}},
    )
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def ray_cluster(ray_session: Any) -> Iterator[Any]:
    """The session's Ray, and a check after the test that nothing was left in it."""
    yield ray_session
    deadline = time.monotonic() + REAP_TIMEOUT
    while True:
        actors = _live_actors(ray_session)
        processes = _host_processes()
        if not actors and not processes:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the test left Ray actors {actors} and host processes {processes}")
        time.sleep(0.05)
