"""``pdc demo``: the pipeline, its options, and a clean stop on Ctrl-C / cancellation."""

from __future__ import annotations

import json
import re
import sys
import threading
from typing import Any

import anyio
import numpy as np
import pytest
from support.placement_plugin import HERE_PLACEMENT
from support.subprocess_support import interrupt_once_running, start_interruptible

import pdc_core
from pdc_core import PersistentKernel
from pdc_core._cli import main
from pdc_core._cli._demo import (
    FEATURE_KERNEL,
    DemoConfig,
    DemoResult,
    numpy_scores,
    run_demo,
    score_records,
    synthetic_stream,
    uses_persistent_kernel,
)
from pdc_core.testing import thread_count


async def test_pipeline_runs_the_feature_stage_as_a_persistent_kernel_on_cpu() -> None:
    threads_before = thread_count()
    result = await run_demo(DemoConfig(messages=5000, backend="cpu", seed=3))
    summary = result.summary()
    assert summary["feature_stage"].startswith("persistent kernel on cpu:0")
    assert summary["messages_processed"] == summary["messages_sent"] == 5000
    assert summary["anomalies_planted"] == 5
    assert summary["anomalies_match"] is True
    assert summary["latency_p50_us"] is not None
    assert summary["interrupted"] is False
    assert thread_count() == threads_before, threading.enumerate()  # kernel worker joined


async def test_backend_without_persistent_kernels_falls_back_to_the_mailbox_actor(
    example_backend: pdc_core.Backend,
) -> None:
    assert not uses_persistent_kernel(example_backend)
    result = await run_demo(DemoConfig(messages=3000, backend="example", seed=2))
    summary = result.summary()
    assert summary["feature_stage"] == (
        "batched NumPy actor in host memory (example has no persistent kernels)"
    )
    assert summary["messages_processed"] == 3000
    assert summary["anomalies_match"] is True


async def test_backend_without_a_kernel_body_falls_back_to_the_mailbox_actor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda_only = PersistentKernel(
        "cuda_only",
        FEATURE_KERNEL.request_dtype,
        FEATURE_KERNEL.reply_dtype,
        bodies={"cuda": "__device__ int pdc_body(const pdc_request&, pdc_reply&) { return 0; }"},
    )
    monkeypatch.setattr("pdc_core._cli._demo.FEATURE_KERNEL", cuda_only)
    result = await run_demo(DemoConfig(messages=2000, backend="cpu", seed=4))
    assert result.feature_stage.endswith("(cpu has no persistent-kernel body)")
    assert result.summary()["anomalies_match"] is True


def test_metal_runs_its_persistent_kernel_where_it_has_them() -> None:
    backend = pytest.importorskip("pdc_metal", reason="pdc-metal is not installed")
    del backend
    metal = pdc_core.get_backend("metal")
    result = anyio.run(run_demo, DemoConfig(messages=2000, backend="metal", seed=5))
    persistent = uses_persistent_kernel(metal)
    assert result.feature_stage.startswith("persistent kernel" if persistent else "batched")
    assert result.summary()["anomalies_match"] is True


def test_kernel_body_is_the_numpy_scoring_over_records() -> None:
    ids, frames = next(iter(synthetic_stream(DemoConfig(messages=700, seed=9))))
    requests = np.zeros(len(ids), FEATURE_KERNEL.request_dtype)
    requests["frame_id"] = ids
    requests["samples"] = frames
    requests.flags.writeable = False  # the body gets a read-only view
    replies = score_records(requests)
    assert replies.dtype == FEATURE_KERNEL.reply_dtype
    assert np.array_equal(replies["frame_id"], ids)
    assert np.array_equal(replies["score"], numpy_scores(frames))
    assert FEATURE_KERNEL.body_for("cpu") is score_records
    assert "pdc_body" in FEATURE_KERNEL.body_for("cuda").source
    median = np.median(frames, axis=1, keepdims=True)
    assert np.array_equal(numpy_scores(frames), np.max(np.abs(frames - median), axis=1))


def test_metal_body_is_the_same_scoring_in_mlx() -> None:
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed")
    ids, frames = next(iter(synthetic_stream(DemoConfig(messages=300, seed=8))))
    replies = FEATURE_KERNEL.body_for("metal")(
        {"frame_id": mx.array(ids.astype(np.uint64)), "samples": mx.array(frames)}
    )
    assert np.array_equal(np.array(replies["frame_id"]), ids)
    np.testing.assert_allclose(np.array(replies["score"]), numpy_scores(frames), rtol=1e-6)


def test_stream_is_deterministic_and_plants_spikes() -> None:
    config = DemoConfig(messages=2000, seed=7)
    first = [frames.copy() for _, frames in synthetic_stream(config)]
    second = [frames for _, frames in synthetic_stream(config)]
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    frames = np.concatenate(first)
    deviation = np.max(np.abs(frames - np.median(frames, axis=1, keepdims=True)), axis=1)
    assert set(np.flatnonzero(deviation > 8.0)) == set(config.planted().tolist())


def test_bad_config() -> None:
    with pytest.raises(ValueError, match="messages"):
        DemoConfig(messages=0)


def user_task_count() -> int:
    """Tasks other than pdc's per-event-loop timer (a service started on first use)."""
    return sum(task.name != "pdc-mailbox-timer" for task in anyio.get_running_tasks())


async def test_cancelling_the_demo_leaves_partial_results_and_nothing_running() -> None:
    tasks_before = user_task_count()
    threads_before = thread_count()
    result = DemoResult(backend="cpu:0", async_backend="test")
    with anyio.CancelScope() as scope:  # cancelled mid-stream: once frames came through
        await run_demo(
            DemoConfig(messages=10_000_000, backend="cpu"), result, lambda _: scope.cancel()
        )
    assert result.interrupted
    assert 0 < result.sent < 10_000_000
    assert result.processed <= result.sent
    summary = result.summary()
    assert summary["interrupted"] is True
    assert summary["anomalies_match"] is True  # compared over the frames processed
    assert user_task_count() == tasks_before
    assert thread_count() == threads_before, threading.enumerate()


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_cli_json(async_backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["demo", "--messages", "3000", "--json", "--async-backend", async_backend, "--seed", "1"]
    )
    summary = json.loads(capsys.readouterr().out)
    assert status == 0
    assert summary["async_backend"] == async_backend
    assert summary["messages_processed"] == 3000
    assert summary["anomalies_match"] is True


def test_cli_table(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per row
    assert main(["demo", "--messages", "1000"]) == 0
    out = capsys.readouterr().out
    assert "exact match" in out
    assert "p99" in out
    # The table says what its latency is, and that start-up is not in the elapsed time.
    latency = next(line for line in out.splitlines() if "latency" in line)
    assert "(end to end at full rate, queueing included)" in latency
    elapsed = next(line for line in out.splitlines() if "elapsed" in line)
    assert re.search(r"s streaming \(start-up before it, not counted: \d+\.\d\d s\)", elapsed)


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_a_paced_run_sends_at_the_rate_it_is_given(
    async_backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--rate 2000/s``: 400 frames in slices of 2, each sent when due, so the last
    goes out 199 ms after the first at the earliest; the summary says what the latency
    measures."""
    argv = ["demo", "--messages", "400", "--rate", "2000/s", "--json"]
    assert main([*argv, "--async-backend", async_backend]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rate_per_s"] == 2000
    assert summary["latency_measures"] == ("end to end, paced at 2,000 frames/s, queueing included")
    assert summary["messages_processed"] == 400
    assert summary["anomalies_match"] is True
    assert summary["elapsed_s"] >= 0.199
    assert summary["setup_s"] >= 0


@pytest.mark.parametrize("rate", ["0", "-5/s", "abc", "nan", "inf", "2000/min"])
def test_a_bad_rate_exits_2_naming_it(rate: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", "--messages", "10", "--rate", rate])
    assert info.value.code == 2
    assert "argument --rate" in capsys.readouterr().err


@pytest.mark.parametrize("rate", [0, -1.0, float("nan"), True, "100"])
def test_a_bad_rate_in_the_config_is_refused(rate: Any) -> None:
    with pytest.raises(ValueError, match="rate must be a positive number of frames per second"):
        DemoConfig(rate=rate)


def test_unknown_backend_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--backend", "nope", "--messages", "10"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err
    assert "'cpu'" in err


@pytest.mark.parametrize("argv", [["--messages", "0"], ["--async-backend", "curio"], ["--bogus"]])
def test_bad_options_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", *argv])
    assert info.value.code == 2


#: What ``pdc demo`` prints on stderr (also with ``--json``) once frames flow.
RUNNING_LINE = "pdc demo: running"


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_ctrl_c_stops_cleanly_with_partial_results(async_backend: str) -> None:
    proc = start_interruptible(
        ["demo", "--json", "--messages", "50000000", "--async-backend", async_backend]
    )
    # past start-up (imports), into the pipeline: frames have been processed; stdout (the
    # JSON summary) is far below a pipe's buffer, so the child can exit before it is read
    out, err = interrupt_once_running(proc, RUNNING_LINE, within=60, exit_within=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    summary = json.loads(out)
    assert summary["interrupted"] is True
    assert 0 < summary["messages_sent"] < 50_000_000


# -- --placement NAME: a placement a plugin registers (pdc_register_placements) ------------

HERE_PLUGIN = (
    HERE_PLACEMENT
    + """

@hookimpl
def pdc_register_placements(register):
    register("here", open_here, "this process")
    register("broken", lambda: 42, "returns no context manager")
"""
)


@pytest.fixture
def here_plugin(install_plugins: Any) -> Any:
    install_plugins("pdc-here", {"here": "pdc_here"}, {"pdc_here": HERE_PLUGIN})
    import pdc_here

    pdc_here.EVENTS.clear()
    return pdc_here


async def test_the_feature_stage_scores_at_a_named_placement(here_plugin: Any) -> None:
    result = await run_demo(DemoConfig(messages=3000, backend="cpu", seed=4, placement="here"))
    summary = result.summary()
    assert summary["placement"] == "here"
    assert summary["feature_stage"] == "batched NumPy actor in a here worker"
    assert summary["messages_processed"] == 3000
    assert summary["anomalies_match"] is True
    assert here_plugin.EVENTS == ["open", ("placed", "feature-scorer"), "close"]


def test_cli_placement(here_plugin: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--placement", "here", "--messages", "2000", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["placement"] == "here"
    assert summary["setup_s"] > 0  # the placement's opening: reported, not in elapsed_s
    assert summary["anomalies_match"] is True
    assert here_plugin.EVENTS[-1] == "close"


def test_an_unknown_placement_is_a_usage_error(
    here_plugin: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--placement", "nope", "--messages", "10"]) == 2
    err = capsys.readouterr().err
    assert "argument --placement: invalid choice: 'nope' (choose from " in err
    assert "'here'" in err
    assert here_plugin.EVENTS == []


def test_a_placement_that_opens_nothing_names_its_plugin(here_plugin: Any) -> None:
    config = DemoConfig(messages=10, backend="cpu", placement="broken")
    with pytest.raises(pdc_core.PluginError, match=r"placement 'broken' of plugin 'here'.*42"):
        anyio.run(run_demo, config)
    with pytest.raises(ValueError, match="placement must be a non-empty name"):
        DemoConfig(placement="")
