"""pdc logs through ``logging``: a ``pdc`` logger with a child per subsystem.

WARNING: crashes, restarts, plugin failures, drops under the drop policy (rate-limited),
a shutdown_timeout that cancelled work. DEBUG: lifecycle. Nothing on the message path.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from pdc_core import ActorCrashed, Mailbox, RestartPolicy, get_backend, open_nursery


async def test_crashes_and_restarts_are_warnings(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[int] = []

    async def flaky(message: Any) -> Any:
        attempts.append(1)
        raise RuntimeError(f"attempt {len(attempts)}")

    caplog.set_level(logging.WARNING, logger="pdc")
    with pytest.raises(ActorCrashed):  # noqa: PT012
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(
                flaky, name="flaky", restart=RestartPolicy(max_restarts=1, backoff=0)
            )
            await ref.tell("a")
            await ref.tell("b")
            await anyio.sleep_forever()  # cancelled by the escalated crash
    records = [r for r in caplog.records if r.name == "pdc.actors"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING]
    assert "actor 'flaky' crashed (RuntimeError: attempt 1); restart 1 of 1" in records[0].message
    assert "actor 'flaky' crashed: RuntimeError: attempt 2" in records[1].message


async def test_lifecycle_is_debug_and_a_quiet_run_logs_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def echo(message: Any) -> Any:
        return message

    caplog.set_level(logging.DEBUG, logger="pdc")
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo, name="echo")
        for i in range(100):
            assert await ref.ask(i) == i
    messages = [r.message for r in caplog.records if r.name == "pdc.actors"]
    assert "starting actor 'echo' (MailboxActor)" in messages
    assert "actor 'echo' stopped" in messages
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name.startswith("pdc"))
    assert len(messages) < 10  # lifecycle only: nothing per message


async def test_drops_are_warned_about_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pdc.mailbox")
    mailbox: Mailbox[int] = Mailbox(4, backpressure="drop_oldest", name="flood")
    for i in range(10_000):
        mailbox.send_nowait(i)
    assert mailbox.statistics().dropped == 9_996
    records = [r for r in caplog.records if r.name == "pdc.mailbox"]
    assert 1 <= len(records) <= 3  # the first drop, then at most once a second
    assert "mailbox 'flood' is full: its drop_oldest policy has dropped 1" in records[0].message


def test_plugin_failures_are_warnings(
    caplog: pytest.LogCaptureFixture, install_plugins: Any
) -> None:
    caplog.set_level(logging.DEBUG, logger="pdc.plugins")
    install_plugins(
        "pdc-broken", {"broken": "pdc_broken"}, {"pdc_broken": "raise ImportError('no')"}
    )
    assert get_backend("cpu").name == "cpu"
    records = [r for r in caplog.records if r.name == "pdc.plugins"]
    warned = [r.message for r in records if r.levelno == logging.WARNING]
    assert warned == ["pdc plugin 'broken' (pdc-broken) skipped: failed to load: ImportError: no"]
    assert any(r.message.startswith("backends registered by plugins: ") for r in records)
