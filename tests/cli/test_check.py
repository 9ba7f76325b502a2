"""``pdc check``: one backend end to end, one line per step, non-zero on any failure.

Run on the cpu backend on every CI run (and on the metal backend's MLX CPU device where
MLX is installed); a backend with a planted fault shows that a failing step is reported
and the exit status says so; a cancelled check leaves no kernel or thread behind.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from pdc_core._cli._check import run_checks
from pdc_core._cli._main import main
from pdc_core.testing import settle_threads, thread_count

STEPS = [
    "backend",
    "allocate host",
    "allocate device",
    "allocate pinned",
    "allocate mapped",
    "allocate managed",
    "copy to device",
    "copy to host",
    "kernel (Python body)",
    "persistent launch",
    "persistent request",
    "persistent batch",
    "beside a resident kernel",
    "round trip (await)",
    "round trip (spin)",
    "persistent stop",
    "released",
]


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_check_passes_on_the_cpu_backend(capsys: pytest.CaptureFixture[str], async_backend: str):
    status = main(
        [
            "check",
            "--backend",
            "cpu",
            "--json",
            "--requests",
            "50",
            "--async-backend",
            async_backend,
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["ok"] is True
    assert [step["name"] for step in report["steps"]] == STEPS
    statuses = {step["name"]: step["status"] for step in report["steps"]}
    # The cpu backend computes on host memory: no pinned, mapped or managed kinds; its
    # resident kernels are threads that no other work waits for.
    assert {name for name, status in statuses.items() if status == "skip"} == {
        "allocate pinned",
        "allocate mapped",
        "allocate managed",
        "beside a resident kernel",
    }
    beside = next(s for s in report["steps"] if s["name"] == "beside a resident kernel")
    assert beside["detail"].startswith("not applicable: cpu has no probe")
    round_trip = next(s for s in report["steps"] if s["name"] == "round trip (spin)")
    assert "p50" in round_trip["detail"]
    assert "over 50 requests" in round_trip["detail"]
    assert all(step["seconds"] >= 0 for step in report["steps"])


def test_check_prints_one_line_per_step(capsys: pytest.CaptureFixture[str]):
    assert main(["check", "--backend", "cpu", "--requests", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(STEPS) + 1
    assert [line.split()[0] for line in lines[:-1]] == [
        "SKIP" if name.startswith(("allocate p", "allocate m", "beside")) else "PASS"
        for name in STEPS
    ]
    assert lines[-1] == "all checks passed"


BROKEN_BACKEND = """
import numpy as np
from pdc_core.backend import hookimpl
from pdc_example_backend import ExampleBackend


class Flaky(ExampleBackend):
    '''The example backend, with a copy to the host that loses the last element.'''

    name = "flaky"

    def to_host(self, device, out=None, stream=None):
        host = np.array(super().to_host(device, out=out, stream=stream))
        host[-1] += 1
        return host


@hookimpl
def pdc_register_backends(register):
    register(Flaky)
"""


def test_a_failing_step_is_reported_and_the_exit_status_says_so(
    install_plugins: Any, example_backend_importable: None, capsys: pytest.CaptureFixture[str]
):
    install_plugins("pdc-flaky", {"flaky": "pdc_flaky"}, modules={"pdc_flaky": BROKEN_BACKEND})
    assert main(["check", "--backend", "flaky", "--requests", "5", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    steps = {step["name"]: step for step in report["steps"]}
    assert steps["copy to host"]["status"] == "fail"
    assert "the array copied back differs from the one sent" in steps["copy to host"]["detail"]
    # Reading device memory back goes through the same faulty copy.
    failed = [name for name, step in steps.items() if step["status"] == "fail"]
    assert failed == ["allocate device", "copy to host"]
    # The steps after it still ran: the example backend declares no persistent kernels.
    assert steps["persistent launch"]["status"] == "skip"
    assert steps["released"]["status"] == "pass"


def test_an_unknown_backend_is_a_usage_error(capsys: pytest.CaptureFixture[str]):
    assert main(["check", "--backend", "no-such-backend"]) == 2
    assert "invalid choice: 'no-such-backend'" in capsys.readouterr().err


def test_requests_must_be_positive(capsys: pytest.CaptureFixture[str]):
    assert main(["check", "--backend", "cpu", "--requests", "0"]) == 2
    assert "--requests must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("backend", "why"),
    [
        ("cpu:abc", "must be a device index"),
        ("cpu:-1", "device index is negative"),
        ("cpu:", "must be a device index"),
        ("cpu:7", "the cpu backend has no device 7"),
    ],
)
def test_a_bad_device_index_is_a_usage_error(
    backend: str, why: str, capsys: pytest.CaptureFixture[str]
):
    # Issue 35, item 17: refused before any step runs, as --backend nope is.
    assert main(["check", "--backend", backend, "--requests", "10"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (error,) = [line for line in captured.err.splitlines() if "error:" in line]
    assert error.startswith("pdc check: error: argument --backend:")
    assert why in error


def test_requests_has_an_upper_bound(capsys: pytest.CaptureFixture[str]):
    # Issue 35, item 18: a usage error, never a MemoryError in the timing steps.
    assert main(["check", "--backend", "cpu", "--requests", "10000001"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--requests must be at most 10,000,000" in captured.err
    assert main(["check", "--backend", "cpu", "--requests", str(10**18)]) == 2


async def test_a_cancelled_check_leaves_no_kernel_or_thread_behind():
    baseline = thread_count()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: run_checks("cpu", requests=10**9))
            # The check's resident kernel runs on a worker thread: cancel once it is up.
            while thread_count() == baseline:  # noqa: ASYNC110 - a thread sets no event
                await anyio.sleep(0.001)
            scope.cancel()
    assert scope.cancelled_caught
    await settle_threads(baseline, within=5.0)


#: A third-party backend of persistent kernels (the cpu backend's worker under another
#: name), which pdc's check has no kernel body for unless the class supplies one.
THIRD_PARTY = """
import numpy as np
from pdc_cpu import CpuBackend

from pdc_core.backend import HostWorkerKernel, hookimpl


def plus_one(requests):
    replies = np.empty(len(requests), requests.dtype)
    replies["id"] = requests["id"]
    replies["value"] = requests["value"] + 1.0
    return replies


class Mine(CpuBackend):
    name = "mine"
    distribution = "pdc-mine"

    def launch_persistent_kernel(self, kernel, rings, **options):
        return HostWorkerKernel.launch(self, kernel, rings, **options)  # the "mine" body
{supply}

@hookimpl
def pdc_register_backends(register):
    register(Mine)
"""

SUPPLY = """
    def check_persistent_body(self):
        return plus_one
"""


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_a_third_party_backend_supplies_the_check_s_kernel_body(
    install_plugins: Any, capsys: pytest.CaptureFixture[str], async_backend: str
) -> None:
    source = THIRD_PARTY.format(supply=SUPPLY)
    install_plugins("pdc-mine", {"mine": "pdc_mine"}, modules={"pdc_mine": source})
    argv = ["check", "--backend", "mine", "--json", "--requests", "20"]
    status = main([*argv, "--async-backend", async_backend])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    statuses = {step["name"]: step["status"] for step in report["steps"]}
    for name in ("persistent launch", "persistent request", "persistent batch", "persistent stop"):
        assert statuses[name] == "pass", report
    from pdc_core._cli._check import CHECK_KERNEL

    assert "mine" not in CHECK_KERNEL.bodies  # the check's own kernel is left as it was


PROBE = """
    def check_beside_resident(self):
        import threading

        return "ran beside it in " + threading.current_thread().name
"""

REFUSING_PROBE = """
    def check_beside_resident(self):
        from pdc_core import CapabilityError

        raise CapabilityError("mine has no device to run anything beside its kernels")
"""


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_the_beside_probe_s_worker_thread_is_not_left_behind(
    install_plugins: Any, capsys: pytest.CaptureFixture[str], async_backend: str
) -> None:
    # The probe runs in the event loop's worker thread, which stays idle after it (AnyIO's
    # for 10 s on asyncio): that is no thread the check left behind.
    source = THIRD_PARTY.format(supply=SUPPLY + PROBE)
    install_plugins("pdc-mine", {"mine": "pdc_mine"}, modules={"pdc_mine": source})
    argv = ["check", "--backend", "mine", "--json", "--requests", "20"]
    status = main([*argv, "--async-backend", async_backend])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    steps = {step["name"]: step for step in report["steps"]}
    assert steps["beside a resident kernel"]["status"] == "pass"
    assert steps["beside a resident kernel"]["detail"].startswith("ran beside it in ")
    assert steps["released"]["status"] == "pass"


def test_a_probe_that_needs_what_the_device_lacks_is_a_skip_saying_why(
    install_plugins: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    source = THIRD_PARTY.format(supply=SUPPLY + REFUSING_PROBE)
    install_plugins("pdc-mine", {"mine": "pdc_mine"}, modules={"pdc_mine": source})
    assert main(["check", "--backend", "mine", "--json", "--requests", "20"]) == 0
    steps = {step["name"]: step for step in json.loads(capsys.readouterr().out)["steps"]}
    assert steps["beside a resident kernel"] == {
        **steps["beside a resident kernel"],
        "status": "skip",
        "detail": "not applicable: mine has no device to run anything beside its kernels",
    }
    assert steps["round trip (await)"]["status"] == "pass"  # the steps after it ran


def test_without_a_supplied_body_the_persistent_steps_say_how_to_supply_one(
    install_plugins: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(
        "pdc-mine", {"mine": "pdc_mine"}, modules={"pdc_mine": THIRD_PARTY.format(supply="")}
    )
    assert main(["check", "--backend", "mine", "--json", "--requests", "20"]) == 0
    steps = {step["name"]: step for step in json.loads(capsys.readouterr().out)["steps"]}
    assert steps["persistent launch"]["status"] == "skip"
    assert (
        "its backend class can supply one with check_persistent_body()"
        in (steps["persistent launch"]["detail"])
    )
    assert "persistent request" not in steps


def test_json_names_the_backend_it_checked_without_backend_option(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PDC_BACKEND", raising=False)
    import pdc_core

    assert main(["check", "--json", "--requests", "20"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == pdc_core.get_backend().qualified_name
