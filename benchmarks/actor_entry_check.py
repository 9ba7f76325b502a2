"""What a mailbox actor's ``tell`` and ``ask`` pay for the handle contract: the entry
check, and (``tell``) the delivery call, each measured against the same path without it.

Every per-message call of a handle first checks whether the caller's cancel scope is
already cancelled (and then raises that cancellation instead of sending), and
``ActorRef.tell`` reaches the mailbox through one call (the mailbox's deliverer). This
measures both in one process, on one actor, in blocks that alternate (their order
rotating from round to round) between:

* ``check`` -- the public path as it is;
* ``bool()`` -- the same with ``bool()`` in place of the check (a C call that returns
  False, the floor of any check);
* ``one function`` (``tell`` only) -- a reference ``tell`` written as one function
  with no check and no call: the rules and the mailbox's queue operations inline, as
  10a00c5 (before the handle contract) had it. It reaches into ``Mailbox``'s private
  fields, which the handle contract forbids: it is a measuring stick, not a candidate.

Each variant is reported with the median of its per-round differences to ``bool()``,
so a burst of load from another process moves both sides of a difference::

    python benchmarks/actor_entry_check.py            # 24 rounds per loop
    python benchmarks/actor_entry_check.py --pairs 8  # quicker
    python benchmarks/actor_entry_check.py --clock cpu  # this process's CPU time

``--clock cpu`` times each block with ``time.process_time()`` instead of the wall
clock: on a machine shared with other work, a block that loses the CPU to another
process is not charged for the time it waited (the event loop runs in one thread).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from bisect import insort
from collections.abc import Callable
from typing import Any

import anyio

import pdc_core
from pdc_core._actors._mailbox import CATCH_UP_AT
from pdc_core._actors._mailbox_actor import MailboxActorRef, Told
from pdc_core._loop import TURN_CHECK_EVERY, current_kit

N_TELL, N_ASK = 50_000, 10_000
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
CHECK, BOOL, ONE = "check", "bool()", "one function"


async def one_function_tell(self: Any, message: Any, *, priority: Any = None) -> None:
    """The measuring stick: ``tell`` as one function (no entry check, no call into the
    mailbox). Handles only what this benchmark sends (an idle or busy actor with room)."""
    if priority is None:
        priority = getattr(message, "priority", 128)
    if type(priority) is not int or not 0 <= priority <= 255:
        raise ValueError(priority)
    if message.__class__ in self._wrapped:
        message = Told(message)
    mailbox = self._mailbox
    kit = self._kit
    ops = kit.ops = kit.ops + 1
    if not ops % TURN_CHECK_EVERY and (mailbox._size >= CATCH_UP_AT or kit.turn_is_over()):
        await kit.checkpoint()
    if mailbox._size >= mailbox._capacity or mailbox._closed:
        raise RuntimeError("the reference tell handles only a mailbox with room")
    taker = mailbox._taker
    if taker is not None and not mailbox._paused:
        mailbox._taker = None
        if not taker.done():
            taker.set_result(message)
            mailbox._sent += 1
            mailbox._received += 1
            return
    lane = mailbox._lanes[priority]
    if lane is None:
        lane = mailbox._new_lane(priority)
    if not lane:
        insort(mailbox._prios, priority)
    lane.append(message)
    size = mailbox._size = mailbox._size + 1
    mailbox._sent += 1
    if size > mailbox._peak:
        mailbox._peak = size
    if (mailbox._receivers or mailbox._taker is not None) and not mailbox._paused:
        mailbox._wake_receiver()


async def measure(rounds: int, clock: Callable[[], float]) -> dict[tuple[str, str], list[float]]:
    handled = 0

    async def handler(message: Any) -> Any:
        nonlocal handled
        handled += 1
        return message

    variants = {"tell": (CHECK, BOOL, ONE), "ask": (CHECK, BOOL)}
    results: dict[tuple[str, str], list[float]] = {
        (op, variant): [] for op, names in variants.items() for variant in names
    }
    public_tell = MailboxActorRef.tell
    async with pdc_core.open_nursery() as nursery:
        ref: Any = await nursery.start_actor(handler)
        check = current_kit().cancel_called
        for _ in range(2000):
            await ref.ask(1)
        gc.disable()
        try:
            for turn in range(rounds):
                for op, names in variants.items():
                    k = turn % len(names)
                    for variant in names[k:] + names[:k]:  # a rotating order
                        ref._cancel_called = check if variant == CHECK else bool
                        MailboxActorRef.tell = one_function_tell if variant == ONE else public_tell  # type: ignore[method-assign]
                        before = handled
                        begin = clock()
                        if op == "tell":
                            for i in range(N_TELL):
                                await ref.tell(i)
                            await ref.ask(0)  # every tell handled
                            n = N_TELL
                        else:
                            for i in range(N_ASK):
                                await ref.ask(i)
                            n = N_ASK
                        results[(op, variant)].append((clock() - begin) / n)
                        expected = n + 1 if op == "tell" else n
                        assert handled - before == expected, (op, variant, handled - before)
        finally:
            gc.enable()
            ref._cancel_called = check
            MailboxActorRef.tell = public_tell  # type: ignore[method-assign]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=24, help="rounds of blocks per loop")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="wall clock or CPU time"
    )
    args = parser.parse_args()
    print("| loop | call | variant | ns a call (median) | against bool(), paired |")
    print("| --- | --- | --- | ---: | ---: |")
    for backend in ("asyncio", "trio"):
        results = anyio.run(measure, args.pairs, CLOCKS[args.clock], backend=backend)
        for op, variant in results:
            times, floor = results[(op, variant)], results[(op, BOOL)]
            base = statistics.median(floor)
            if variant == BOOL:
                against = "-"
            else:
                diff = statistics.median(t - f for t, f in zip(times, floor, strict=True))
                against = f"{diff * 1e9:+,.0f} ns ({diff / base:+.1%})"
            print(
                f"| {backend} | {op} | {variant} | {statistics.median(times) * 1e9:,.0f} "
                f"| {against} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
