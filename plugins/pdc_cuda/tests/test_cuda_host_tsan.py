"""ThreadSanitizer on the host build of the ring kernel: single kernels and a 3-stage
pipeline, 1 and 32 threads per block, driven by the C++ host side of
``pdc_cuda/testing/host/tsan_driver.cpp`` (Python's NumPy stores are invisible to TSan).

Fails on any TSan report, in the kernel or in the harness; each report is one line:
its kind and the source line of each access. Runs in the normal suite; its kernels and
the driver are built up front with the other host-build modules' (``conftest.py``'s
``host_builds``), once per cache.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_pipeline_support import FRAGILE, FRAGILE_CODE, TWICE, abc
from cuda_test_support import host_build_marks
from pdc_cuda._ring_source import ring_template
from pdc_cuda.testing._build import BASE_FLAGS, TSAN_FLAGS
from pdc_cuda.testing._tsan import TsanRun, tsan_pipeline, tsan_single

pytestmark = [
    *host_build_marks(),
    pytest.mark.usefixtures("host_builds"),  # every kernel and the driver, built up front
]


def test_the_tsan_builds_are_optimized_as_the_host_builds() -> None:
    """TSan sees the compiled code at -O1, as every host build is made: at -O0 it would
    miss a race that only the optimizer's hoisted loads have (issue 33: every thread
    loaded thread 0's shared command word at -O1 before the kernel kept it in a register)."""
    flags = (*BASE_FLAGS, *TSAN_FLAGS)
    assert [flag for flag in flags if flag.startswith("-O")][-1] == "-O1"


def _check(run: TsanRun) -> None:
    assert not run.reports, "ThreadSanitizer reports:\n" + "\n".join(run.reports)
    assert run.returncode == 0, run.output[-4000:]


@pytest.mark.parametrize("threads", [1, 32])
def test_a_kernel_drains_pauses_and_answers_everything(threads: int) -> None:
    _check(tsan_single(TWICE, threads=threads, scenario="drain", count=200, mul=2, add=0))


@pytest.mark.parametrize("threads", [1, 32])
def test_a_staged_kernel_drains_and_answers_everything(threads: int) -> None:
    """The block-copy path (the driver's 16-byte records are read in place by default):
    the body's source defines PDC_STAGE first, as ``-DPDC_STAGE=1`` would."""
    staged = "#define PDC_STAGE 1\n" + TWICE
    _check(tsan_single(staged, threads=threads, scenario="drain", count=200, mul=2, add=0))


def test_a_kernel_stopped_now() -> None:
    _check(tsan_single(TWICE, threads=32, scenario="now", count=200, mul=2, add=0))


@pytest.mark.parametrize("threads", [1, 32])
def test_a_kernel_whose_body_fails(threads: int) -> None:
    # FRAGILE fails on x == 14: request 14 of the driver's (x = index).
    error = (FRAGILE_CODE, "the kernel body returned an error for request #14")
    _check(
        tsan_single(
            FRAGILE, threads=threads, scenario="error", count=100, mul=2, add=0, error=error
        )
    )


@pytest.mark.parametrize("threads", [1, 32])
def test_a_three_stage_pipeline_drains(threads: int) -> None:
    # a adds 1, b doubles, c subtracts 3: 2x - 1; links of 4, 3 and 5 slots.
    _check(tsan_pipeline(abc(), threads=threads, scenario="drain", count=200, mul=2, add=-1))


def test_a_three_stage_pipeline_whose_middle_stage_fails() -> None:
    # b fails on x == 14, which is record 13 after a.
    error = (FRAGILE_CODE, "stage 1 ('b'): the kernel body returned an error for request #13")
    _check(
        tsan_pipeline(
            abc(middle=FRAGILE), threads=32, scenario="error", count=100, mul=2, add=-1, error=error
        )
    )


#: The start-up load this harness found racing with the host (issue 23), as it was.
_RACY = "in_head_seen = in.word64(PDC_OFF_IN_HEAD);"
_FIXED = "in_head_seen = in.load_relaxed64(PDC_OFF_IN_HEAD);"


def test_the_harness_sees_a_kernel_racing_with_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The positive control: put back the plain start-up load of IN_HEAD, and TSan must
    report it, at that line, racing with the driver's store of IN_HEAD."""
    template = ring_template()
    assert _FIXED in template
    racy = template.replace(_FIXED, _RACY)
    monkeypatch.setattr("pdc_cuda._ring_source.ring_template", functools.partial(str, racy))
    run = tsan_single(TWICE, threads=1, scenario="drain", count=50, mul=2, add=0)
    assert any(_RACY in report and "tsan_driver.cpp" in report for report in run.reports), (
        run.reports or run.output[-4000:]
    )
