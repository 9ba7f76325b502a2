"""The ``pdc`` command at its edges: a closed pipe, a bad PDC_BACKEND, an unavailable backend."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pdc_core
from pdc_core import BackendUnavailable
from pdc_core._cli import main


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pipe with no reader")
@pytest.mark.parametrize("argv", [["info"], ["plugins", "--json"], ["info", "--json"]])
def test_a_reader_that_went_away_is_no_traceback(argv: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` that has already exited: every write is EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pdc_core", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr
    assert "BrokenPipeError" not in done.stderr


def test_a_bad_pdc_backend_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PDC_BACKEND", "nope")
    with pytest.raises(BackendUnavailable, match=r"PDC_BACKEND='nope': no backend is named 'nope'"):
        pdc_core.get_backend()
    assert main(["info"]) == 2
    assert "error: PDC_BACKEND='nope': no backend is named 'nope'" in capsys.readouterr().out
    monkeypatch.setenv("PDC_BACKEND", "CPU")  # names are case-insensitive
    assert pdc_core.get_backend().name == "cpu"


def test_demo_on_an_unavailable_backend_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    cuda = next((b for b in pdc_core.available_backends() if b.name == "cuda"), None)
    if cuda is None or cuda.availability.available:
        pytest.skip("needs pdc-cuda installed on a machine where cuda is unavailable")
    for command in ("demo", "check"):
        assert main([command, "--backend", "cuda"]) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"pdc {command}: error: ")  # no usage line first
        assert (
            "the cuda backend (pdc-cuda) is installed but cannot run here: "
            f"{cuda.availability.reason}"
        ) in error
        assert "Without a GPU, pdc_cuda.testing.HostCudaBackend runs" in error
