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


#: A C++ compiler that logs each of its compiles, and holds each a while (so two
#: processes' builds of one kernel overlap whenever both start one).
LOGGING_CXX = """#!/bin/sh
case "$*" in *-dumpfullversion*) ;; *) echo "$*" >> "$PDC_TEST_CXX_LOG"; sleep 1 ;; esac
exec g++ "$@"
"""


@pytest.mark.cuda_host
def test_two_processes_building_at_once_compile_once_and_write_nothing_into_their_cwd(
    tmp_path: Path,
) -> None:
    """Two processes (two test runs, or pytest-xdist workers) building one kernel into
    one fresh cache: one compiles the precompiled header and the kernel, the other
    waits for them and uses them; neither writes into its working directory."""
    availability = HostCudaBackend.availability()
    if not availability.available:
        pytest.skip(f"no host build of the ring kernel: {availability.reason}")
    cache, log = tmp_path / "cache", tmp_path / "compiles.log"
    cxx = tmp_path / "logging-g++"
    cxx.write_text(LOGGING_CXX, encoding="utf-8")
    cxx.chmod(0o755)
    env = {
        **os.environ,
        "PDC_CUDA_HOST_CACHE": str(cache),
        "PDC_CUDA_HOST_CXX": str(cxx),
        "PDC_TEST_CXX_LOG": str(log),
    }
    children = []
    for name in ("first", "second"):
        cwd = tmp_path / name
        cwd.mkdir()
        child = subprocess.Popen(
            [sys.executable, "-c", COLD_BUILD],
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        children.append((cwd, child))
    builds = set()
    for cwd, child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert result["cwd"] == []
        assert list(cwd.iterdir()) == []
        assert Path(result["build"]).parent == cache
        builds.add(result["build"])
    assert len(builds) == 1
    compiles = log.read_text(encoding="utf-8").splitlines()
    assert len([line for line in compiles if "c++-header" in line]) == 1, compiles
    assert len([line for line in compiles if "host_launch.cpp" in line]) == 1, compiles


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


def test_a_link_planted_at_a_build_lock_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("fcntl", reason="build locks need flock (POSIX)")
    from pdc_cuda.testing._build import _held_across_processes

    target = tmp_path / "elsewhere"
    planted = tmp_path / "ring-key.lock"
    planted.symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"), _held_across_processes(planted):
        pass
    assert not target.exists()
