"""Running a long ``pdc`` command: the line it prints once its work is under way, and
telling an interrupt from a failure."""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["announce_once", "only_interrupts"]


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


def only_interrupts(group: BaseExceptionGroup[BaseException]) -> bool:
    """Whether every error of ``group`` (nested groups included) is a KeyboardInterrupt:
    a command interrupted by Ctrl-C, not one that failed."""
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            if not only_interrupts(error):
                return False
        elif not isinstance(error, KeyboardInterrupt):
            return False
    return True
