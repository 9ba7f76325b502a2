"""Run a ``pdc`` command in a child process and interrupt it once it says it is running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time


def start_interruptible(argv: list[str]) -> subprocess.Popen[str]:
    """Start ``python -m pdc_core *argv`` with pipes, able to receive SIGINT.

    A suite started in the background by a script (``pytest ... &``) runs with SIGINT
    ignored, and a child would inherit that: the child starts with the default.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sigint = signal.getsignal(signal.SIGINT)
    if sigint == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "pdc_core", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
    finally:
        if sigint == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class StderrLines:
    """Reads a process's stderr line by line on a thread, so a test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.ended = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def wait_for(self, prefix: str, timeout: float) -> bool:
        """Whether a line starting with ``prefix`` came (before the end, within ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(line.startswith(prefix) for line in self.lines):
                remaining = deadline - time.monotonic()
                if self.ended or remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def text(self, timeout: float) -> str:
        """Everything read, once the stream has ended."""
        self._thread.join(timeout)
        with self._changed:
            return "".join(self.lines)
