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


def interrupt_once_running(
    proc: subprocess.Popen[str], line: str, *, within: float, exit_within: float
) -> tuple[str, str]:
    """Send SIGINT to ``proc`` once a stderr line starts with ``line`` (within
    ``within`` seconds, else fail), wait up to ``exit_within`` seconds for it to exit,
    and return its stdout and stderr. It is killed if still running when this ends."""
    try:
        assert proc.stdout is not None
        stderr = StderrLines(proc)
        running = stderr.wait_for(line, timeout=within)
        assert running, f"no {line!r} line on stderr:\n{stderr.text(timeout=0)}"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=exit_within)
        return proc.stdout.read(), stderr.text(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
