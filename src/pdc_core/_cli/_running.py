"""The line a long ``pdc`` command prints once its work is under way."""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["announce_once"]


def announce_once(command: str, detail: str) -> Callable[[], None]:
    """A callable that prints ``pdc <command>: running <detail>`` on stderr the first time.

    Call it when results start to come in: scripts (and the tests) wait for this line
    before they interrupt the command, instead of guessing how long start-up takes.
    """
    announced = False

    def announce() -> None:
        nonlocal announced
        if not announced:
            announced = True
            print(f"pdc {command}: running {detail}", file=sys.stderr, flush=True)

    return announce
