"""The host build keeps every product in its cache directory, and the cache can be
emptied with one command (``python -m pdc_cuda.testing --clear-cache``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from pdc_cuda.testing import HostCudaBackend, cache_size, clear_cache

# A cold build (NVRTC's gate with its automatic precompiled header, then g++ with its
# own) of a kernel no other test builds, in a fresh cache, from an empty directory:
# the child lists that directory while it is still running (NVRTC deletes its header
# image at exit, so afterwards it would look clean either way).
COLD_BUILD = """
import json, os
import numpy as np
from pdc_core import PersistentKernel
from pdc_cuda.testing import build_ring_kernel, kernel_builds

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
kernel = PersistentKernel("cache_probe", REQ, REQ, capacity=4)
kernel.add_body("cuda", "__device__ int pdc_body(const pdc_request& r, pdc_reply& o)"
                " { o.id = r.id; o.x = r.x + 0.25; return 0; }")
for planned in kernel_builds(kernel):
    build = build_ring_kernel(planned.source, options=planned.options)
print(json.dumps({"cwd": sorted(os.listdir(".")), "build": str(build.path)}))
"""


@pytest.mark.cuda_host
def test_a_cold_build_writes_nothing_into_the_working_directory(tmp_path: Path) -> None:
    availability = HostCudaBackend.availability()
    if not availability.available:
        pytest.skip(f"no host build of the ring kernel: {availability.reason}")
    cwd, cache = tmp_path / "cwd", tmp_path / "cache"
    cwd.mkdir()
    env = {**os.environ, "PDC_CUDA_HOST_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", COLD_BUILD],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cwd"] == []
    assert list(cwd.iterdir()) == []
    assert Path(result["build"]).parent == cache


def test_the_cache_is_cleared_by_one_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "ring-abc.so").write_bytes(b"x" * 1000)
    (cache / "nvrtc-abc.ok").touch()
    (cache / "pch-abc").mkdir()
    (cache / "pch-abc" / "pdc_host_pch.h.gch").write_bytes(b"y" * 2000)
    (cache / "build-in-progress").mkdir()  # another process's build: left alone
    (cache / "notes.txt").write_text("the user's own file")  # not the host build's
    monkeypatch.setenv("PDC_CUDA_HOST_CACHE", str(cache))
    assert cache_size() == 3000
    shown = subprocess.run(
        [sys.executable, "-m", "pdc_cuda.testing"], capture_output=True, text=True, timeout=60
    )
    assert f"host-build cache: {cache} (0.0 MiB)" in shown.stdout
    assert "python -m pdc_cuda.testing --clear-cache" in shown.stdout
    cleared = subprocess.run(
        [sys.executable, "-m", "pdc_cuda.testing", "--clear-cache"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cleared.returncode == 0, cleared.stderr
    assert "removed 0.0 MiB of host builds" in cleared.stdout
    assert sorted(path.name for path in cache.iterdir()) == ["build-in-progress", "notes.txt"]
    assert cache_size() == 0
    assert clear_cache() == 0
