"""``pdc_ray.connect(address="ray://...")``: pdc-ray through Ray Client.

The test starts a Ray Client server of its own (``python -m ray.util.client.server``,
legacy mode: the server is the driver) attached to the session's local Ray (see
conftest.py), and runs ray_client_program.py in a process of its own as the client:
remote actors (ask, ask_many, location, a crash with its cause, cancellation with a
call pending) and a remote persistent kernel (``ask_batch``), under asyncio and trio.
The server is ended (its process group, which the test started) whatever happens, and
the session's leak check then finds no actor and no host process left. Skipped without
grpcio (Ray's ``client`` extra, which pdc-ray depends on).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PROGRAM = Path(__file__).with_name("ray_client_program.py")
#: Seconds the client program may take (two event loops, a few remote actors each).
CLIENT_TIMEOUT = 180


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_ray_client_runs_remote_actors_and_kernels_under_asyncio_and_trio(
    ray_cluster: Any, tmp_path: Path
) -> None:
    pytest.importorskip("grpc", reason="Ray Client needs grpcio: pip install 'ray[client]'")
    gcs_address = ray_cluster.get_runtime_context().gcs_address
    port = _free_port()
    with (tmp_path / "server.log").open("wb") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ray.util.client.server",
                "--address",
                gcs_address,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--mode",
                "legacy",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        client = subprocess.run(
            [sys.executable, str(PROGRAM), f"ray://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT,
            check=False,
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert client.returncode == 0, client.stderr[-4000:]
    lines = [line for line in client.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, client.stdout[-2000:] + client.stderr[-2000:]
    results = json.loads(lines[-1].removeprefix("RESULT "))
    expected = {
        "started": True,
        "cpus": 2.0,
        "ask": 21,
        "ask_many": True,
        "pid_differs": True,
        "located": True,
        "ask_batch": True,
        "crash": "LookupError: remote boom",
        "cancelled": True,
    }
    assert results == {"asyncio": expected, "trio": expected}
