"""RingKernelRuntime: lifecycle, delivery, termination, telemetry and bad input.

Every test runs under asyncio and trio.
"""

# `except asyncio.TimeoutError` is kept on purpose: it is what the seed kernels write.
# ruff: noqa: PT012, UP041

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from pdc_core import (
    ActorCrashed,
    ActorState,
    KernelAlreadyExistsError,
    KernelNotFoundError,
    KernelState,
    KernelStateError,
    LifecycleError,
    MailboxFull,
    MessageTimeout,
    Request,
    Response,
    RestartPolicy,
    RingKernel,
    RingKernelRuntime,
    ring_kernel,
)
from pdc_core._pydotcompute._seed import get_ring_kernel, registered_ring_kernels

LIMIT = 10


async def doubler(ctx: Any) -> None:
    """The seeds' loop shape: replies data * 2, correlated."""
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.05)
        except asyncio.TimeoutError:
            continue
        await ctx.send(Response(result=msg.data * 2, correlation_id=msg.message_id))


ring_kernel(kernel_id="rk_doubler", queue_size=64)(doubler)


async def plain_loop(ctx: Any) -> None:
    """PyDotCompute's docstring shape: no should_terminate check at all."""
    while True:
        msg = await ctx.receive()
        await ctx.send(msg)


async def wait_until(predicate: Any) -> None:
    with anyio.fail_after(LIMIT):
        while not predicate():  # noqa: ASYNC110
            await anyio.sleep(0.001)


async def test_two_phase_lifecycle_and_states() -> None:
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch("rk_doubler")
        assert isinstance(kernel, RingKernel)
        assert runtime.get_kernel_state("rk_doubler") is KernelState.LAUNCHED
        assert not kernel.ctx.is_active
        await runtime.activate("rk_doubler")
        assert kernel.kernel_state is KernelState.ACTIVE
        assert kernel.state is ActorState.RUNNING
        await runtime.send("rk_doubler", Request(data=21))
        response = await runtime.receive("rk_doubler")
        assert response.result == 42
        request = Request(data=4)
        reply = await runtime.send_and_receive("rk_doubler", request, timeout=LIMIT)
        assert (reply.result, reply.correlation_id) == (8, request.message_id)
        await runtime.deactivate("rk_doubler")
        assert runtime.kernel_states == {"rk_doubler": KernelState.DEACTIVATED}
        await runtime.reactivate("rk_doubler")
        await runtime.terminate("rk_doubler")
        assert runtime.get_kernel_state("rk_doubler") is KernelState.TERMINATED
        assert runtime.kernel_ids == []  # a terminated kernel leaves kernel_ids
        assert kernel.state is ActorState.STOPPED
    assert "rk_doubler" in repr(kernel)


async def test_transitions_in_the_wrong_state_name_the_state() -> None:
    async with RingKernelRuntime() as runtime:
        await runtime.launch("rk_doubler")
        with pytest.raises(KernelStateError, match=r"deactivate .* in state LAUNCHED"):
            await runtime.deactivate("rk_doubler")
        with pytest.raises(KernelStateError, match=r"reactivate .* in state LAUNCHED"):
            await runtime.reactivate("rk_doubler")
        await runtime.activate("rk_doubler")
        with pytest.raises(KernelStateError, match=r"activate .* in state ACTIVE") as info:
            await runtime.activate("rk_doubler")
        assert info.value.state == "ACTIVE"
        assert isinstance(info.value, RuntimeError)


async def test_deactivate_really_pauses_delivery() -> None:
    received: list[int] = []
    timeouts = 0

    async def recorder(ctx: Any) -> None:
        nonlocal timeouts
        while not ctx.should_terminate:
            try:
                msg = await ctx.receive(timeout=0.01)
            except TimeoutError:
                timeouts += 1
                continue
            received.append(msg.data)

    async with RingKernelRuntime() as runtime:
        await runtime.launch("recorder", recorder)
        await runtime.activate("recorder")
        await runtime.send("recorder", Request(data=1))
        await wait_until(lambda: received == [1])
        await runtime.deactivate("recorder")
        for i in range(2, 5):
            await runtime.send("recorder", Request(data=i))
        before = timeouts
        # A second timeout is of a receive() begun after the sends: it waited with all
        # three messages queued.
        await wait_until(lambda: timeouts >= before + 2)
        assert received == [1]  # nothing delivered while deactivated
        assert timeouts > before  # receive() waited and timed out meanwhile
        assert runtime.get_telemetry("recorder").queue_depth == 3
        await runtime.reactivate("recorder")
        await wait_until(lambda: received == [1, 2, 3, 4])


async def test_messages_sent_before_activation_are_queued_by_priority() -> None:
    order: list[str] = []

    async def worker(ctx: Any) -> None:
        while not ctx.should_terminate:
            if not ctx.is_active:
                await ctx.wait_active()
                continue
            try:
                msg = await ctx.receive(timeout=0.05)
            except asyncio.TimeoutError:
                continue
            order.append(msg.data)

    async with RingKernelRuntime() as runtime:
        await runtime.launch("prio_worker", worker)
        await runtime.send("prio_worker", Request(data="normal", priority=128))
        await runtime.send("prio_worker", Request(data="low", priority=1))
        await runtime.send("prio_worker", Request(data="urgent", priority=255))
        await runtime.send("prio_worker", Request(data="normal-2", priority=128))
        await runtime.activate("prio_worker")
        await wait_until(lambda: len(order) == 4)
    assert order == ["urgent", "normal", "normal-2", "low"]


async def test_unknown_kernel_ids_list_the_known_ones() -> None:
    async with RingKernelRuntime() as runtime:
        await runtime.launch("rk_doubler")
        for call in (
            lambda: runtime.send("nope", Request()),
            lambda: runtime.receive("nope"),
            lambda: runtime.activate("nope"),
            lambda: runtime.terminate("nope"),
        ):
            with pytest.raises(KernelNotFoundError, match=r"'nope'.*'rk_doubler'") as info:
                await call()
            assert isinstance(info.value, LookupError)
            assert info.value.known == ("rk_doubler",)
        with pytest.raises(KernelNotFoundError, match="rk_doubler"):
            runtime.get_telemetry("nope")
        with pytest.raises(KernelNotFoundError, match=r"never-registered.*rk_doubler"):
            await runtime.launch("never-registered")
    with pytest.raises(KernelNotFoundError):
        get_ring_kernel("never-registered")


async def test_priority_out_of_range_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="300"):
        Request(data=1, priority=300)

    class Loose:
        priority = -5

    async with RingKernelRuntime() as runtime:
        await runtime.launch("rk_doubler")
        with pytest.raises(ValueError, match="-5"):
            await runtime.send("rk_doubler", Loose())
        with pytest.raises(ValueError, match="999"):
            await runtime.send("rk_doubler", Request(), priority=999)


async def test_input_and_output_types_are_checked() -> None:
    class Other:
        pass

    async def wrong_output(ctx: Any) -> None:
        msg = await ctx.receive()
        await ctx.send(msg.data)  # not a Response

    ring_kernel(kernel_id="typed", input_type=Request, output_type=Response)(wrong_output)
    with anyio.fail_after(LIMIT), pytest.raises(ActorCrashed) as info:
        async with RingKernelRuntime() as runtime:
            await runtime.launch("typed")
            await runtime.activate("typed")
            with pytest.raises(TypeError, match="accepts Request messages, got Other"):
                await runtime.send("typed", Other())
            await runtime.send("typed", Request(data=3))
            await runtime.receive("typed")
    assert isinstance(info.value.cause, TypeError)
    assert "output_type=Response" in str(info.value.cause)


async def test_launching_a_live_id_twice_is_refused() -> None:
    async with RingKernelRuntime() as runtime:
        first = await runtime.launch("rk_doubler")
        with pytest.raises(KernelAlreadyExistsError, match=r"already launched .*LAUNCHED"):
            await runtime.launch("rk_doubler")
        await runtime.activate("rk_doubler")
        await runtime.terminate("rk_doubler")
        second = await runtime.launch("rk_doubler")  # a terminated id may be reused
        assert second is not first
        await runtime.activate("rk_doubler")
        assert (await runtime.ask("rk_doubler", Request(data=5))).result == 10


async def test_send_and_receive_in_the_wrong_state_name_it() -> None:
    async with RingKernelRuntime() as runtime:
        await runtime.launch("rk_doubler")
        await runtime.activate("rk_doubler")
        await runtime.send("rk_doubler", Request(data=1))
        await runtime.terminate("rk_doubler")
        with pytest.raises(KernelStateError, match=r"send to .* in state TERMINATED"):
            await runtime.send("rk_doubler", Request(data=2))
        # what the kernel replied before terminating can still be read ...
        assert (await runtime.receive("rk_doubler")).result == 2
        # ... and then receiving says why nothing more will come
        with pytest.raises(KernelStateError, match=r"receive from .* in state TERMINATED"):
            await runtime.receive("rk_doubler")


async def test_receive_timeout_is_a_timeout_error() -> None:
    async with RingKernelRuntime() as runtime:
        await runtime.launch("rk_doubler")
        await runtime.activate("rk_doubler")
        with pytest.raises(asyncio.TimeoutError):
            await runtime.receive("rk_doubler", timeout=0.01)
        with pytest.raises(MessageTimeout):
            await runtime.receive("rk_doubler", timeout=0)


async def test_terminate_drains_the_queue_first() -> None:
    async with RingKernelRuntime() as runtime:
        await runtime.launch("rk_doubler")
        await runtime.activate("rk_doubler")
        await runtime.deactivate("rk_doubler")
        for i in range(10):
            await runtime.send("rk_doubler", Request(data=i))
        await runtime.terminate("rk_doubler", timeout=LIMIT)
        results = [(await runtime.receive("rk_doubler")).result for _ in range(10)]
        telemetry = runtime.get_telemetry("rk_doubler")
    assert results == [2 * i for i in range(10)]
    assert telemetry is not None
    assert telemetry.messages_processed == 10
    assert telemetry.messages_discarded == 0
    assert telemetry.error_count == 0


async def test_a_loop_without_should_terminate_ends_cleanly() -> None:
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch("plain", plain_loop)
        await runtime.activate("plain")
        await runtime.send("plain", "ping")
        assert await runtime.receive("plain") == "ping"
        with anyio.fail_after(LIMIT):
            await runtime.terminate("plain")
    assert kernel.kernel_state is KernelState.TERMINATED
    assert kernel.telemetry().error_count == 0


async def test_terminate_times_out_then_cancels() -> None:
    async def stuck(ctx: Any) -> None:
        await ctx.receive()
        await anyio.sleep_forever()

    async with RingKernelRuntime() as runtime:
        await runtime.launch("stuck", stuck)
        await runtime.activate("stuck")
        for i in range(3):
            await runtime.send("stuck", Request(data=i))
        with anyio.fail_after(LIMIT):
            await runtime.terminate("stuck", timeout=0.05)
        telemetry = runtime.get_telemetry("stuck")
    assert telemetry is not None
    assert telemetry.state == "TERMINATED"
    assert telemetry.messages_processed == 1
    assert telemetry.messages_discarded == 2


async def test_runtime_exit_terminates_kernels_and_bounds_the_wait() -> None:
    async def stubborn(ctx: Any) -> None:
        while True:
            try:
                await ctx.receive()
            except BaseException:  # swallows even its termination
                await anyio.sleep(0.01)

    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime(shutdown_timeout=0.05) as runtime:
            a = await runtime.launch("rk_doubler")
            await runtime.activate("rk_doubler")
            b = await runtime.launch("stubborn", stubborn)
            await runtime.activate("stubborn")
    assert a.kernel_state is KernelState.TERMINATED
    assert b.kernel_state is KernelState.TERMINATED
    assert not runtime.is_active


async def test_telemetry_counts_are_real() -> None:
    async with RingKernelRuntime(enable_telemetry=True) as runtime:
        await runtime.launch("rk_doubler")
        await runtime.activate("rk_doubler")
        n = 64
        for i in range(n):
            await runtime.send("rk_doubler", Request(data=i))
        for _ in range(n):
            await runtime.receive("rk_doubler")
        telemetry = runtime.get_telemetry("rk_doubler")
        assert telemetry is not None
        assert telemetry.messages_received == n
        assert telemetry.messages_processed == n
        assert telemetry.messages_sent == n
        assert telemetry.queue_depth == 0
        assert telemetry.output_depth == 0
        assert telemetry.messages_dropped == 0
        assert telemetry.throughput > 0
        assert telemetry.latency_count == n // 8  # one message in 8 is timed
        assert 0 < telemetry.latency_p50_ns <= telemetry.latency_p99_ns
        assert telemetry.min_latency_ns <= telemetry.avg_latency_ns <= telemetry.max_latency_ns
        assert telemetry.queue_wait_p50_ns > 0
        assert telemetry.to_dict()["throughput"] == pytest.approx(telemetry.throughput)
        summary = runtime.get_summary()
        assert summary["total_messages_processed"] == n
        assert set(runtime.get_all_telemetry()) == {"rk_doubler"}


async def test_telemetry_can_be_disabled() -> None:
    async with RingKernelRuntime(enable_telemetry=False) as runtime:
        kernel = await runtime.launch("rk_doubler")
        await runtime.activate("rk_doubler")
        assert (await runtime.ask("rk_doubler", Request(data=1))).result == 2
        assert runtime.get_telemetry("rk_doubler") is None
        assert runtime.get_all_telemetry() == {}
        assert kernel.telemetry().messages_processed == 1  # counts are kept anyway
        assert kernel.telemetry().latency_count == 0


async def test_drop_and_raise_policies_are_counted() -> None:
    async def idle(ctx: Any) -> None:
        await ctx.wait_active()
        await anyio.sleep_forever()

    ring_kernel(kernel_id="lossy", queue_size=4, backpressure="drop_oldest")(idle)
    ring_kernel(kernel_id="strict", queue_size=4, backpressure="raise")(idle)
    async with RingKernelRuntime(shutdown_timeout=0.01) as runtime:
        await runtime.launch("lossy")
        await runtime.launch("strict")
        for i in range(10):
            await runtime.send("lossy", Request(data=i))
        for i in range(4):
            await runtime.send("strict", Request(data=i))
        with pytest.raises(MailboxFull):
            await runtime.send("strict", Request(data=4))
        with pytest.raises(MailboxFull):  # "raise" never waits, whatever the timeout
            await runtime.send("strict", Request(data=5), timeout=0.01)
        lossy = runtime.get_telemetry("lossy")
        strict = runtime.get_telemetry("strict")
    assert lossy is not None
    assert (lossy.messages_received, lossy.messages_dropped, lossy.queue_depth) == (10, 6, 4)
    assert strict is not None
    assert strict.messages_rejected == 2


async def test_ask_matches_replies_by_correlation_id() -> None:
    async def reverser(ctx: Any) -> None:
        """Collects three requests, answers them in reverse order."""
        while not ctx.should_terminate:
            try:
                batch = await ctx.receive_batch(3, timeout=0.05)
            except asyncio.TimeoutError:
                continue
            while len(batch) < 3:
                batch.append(await ctx.receive())
            for msg in reversed(batch):
                await ctx.send(msg.respond(msg.data + 100))
            await ctx.send(Response(result="uncorrelated"))

    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch("reverser", reverser)
        await runtime.activate("reverser")
        results: dict[int, Any] = {}

        async def ask(i: int) -> None:
            results[i] = (await kernel.ask(Request(data=i), timeout=LIMIT)).result

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(ask, i)
        assert results == {0: 100, 1: 101, 2: 102}
        # correlated replies resolve their ask and never reach the output queue
        assert (await runtime.receive("reverser", timeout=LIMIT)).result == "uncorrelated"
        with anyio.fail_after(LIMIT):
            replies = await kernel.ask_many([Request(data=7), Request(data=8), Request(data=9)])
        assert [r.result for r in replies] == [107, 108, 109]
        with pytest.raises(TypeError, match="message_id"):
            await kernel.ask("not a message")


async def test_asking_with_a_request_already_pending_is_refused() -> None:
    release = anyio.Event()

    async def held_echo(ctx: Any) -> None:
        while not ctx.should_terminate:
            msg = await ctx.receive()
            await release.wait()
            await ctx.send(msg.respond(msg.data))

    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime() as runtime:
            kernel = await runtime.launch("held_echo", held_echo)
            await runtime.activate("held_echo")
            request = Request(data=1)
            replies: list[Any] = []

            async def first() -> None:
                replies.append(await kernel.ask(request))

            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                await anyio.wait_all_tasks_blocked()  # the first ask is pending
                with pytest.raises(ValueError, match="is already pending on kernel 'held_echo'"):
                    await kernel.ask(request)
                with pytest.raises(ValueError, match="already pending"):
                    await kernel.ask_many([request])
                release.set()
            assert [reply.result for reply in replies] == [1]
            twice = Request(data=2)
            with pytest.raises(ValueError, match=f"request {twice.message_id} is already pending"):
                await kernel.ask_many([twice, twice])
            assert [r.result for r in await kernel.ask_many([Request(data=3)])] == [3]
            with pytest.raises(MessageTimeout):  # nothing stray reached the output queue
                await runtime.receive("held_echo", timeout=0.05)


async def test_ask_on_a_kernel_that_never_replies_times_out_or_fails_on_stop() -> None:
    async def sink(ctx: Any) -> None:
        while True:
            await ctx.receive()

    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch("sink", sink)
        await runtime.activate("sink")
        with pytest.raises(MessageTimeout):
            await kernel.ask(Request(data=1), timeout=0.01)
        outcome: list[BaseException] = []

        async def waiting() -> None:
            try:
                await kernel.ask(Request(data=2))
            except Exception as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            await anyio.wait_all_tasks_blocked()  # the ask was sent and waits for a reply
            await runtime.terminate("sink")
    assert len(outcome) == 1
    assert "terminated before replying" in str(outcome[0])


async def test_kernel_crash_is_raised_by_the_runtime() -> None:
    async def fragile(ctx: Any) -> None:
        msg = await ctx.receive()
        raise RuntimeError(f"bad input {msg.data}")

    with anyio.fail_after(LIMIT), pytest.raises(ActorCrashed) as info:
        async with RingKernelRuntime() as runtime:
            kernel = await runtime.launch("fragile", fragile)
            await runtime.activate("fragile")
            await runtime.send("fragile", Request(data=13))
            await anyio.sleep_forever()
    assert info.value.actor_id == "fragile"
    assert "bad input 13" in str(info.value)
    assert kernel.kernel_state is KernelState.FAILED
    assert kernel.telemetry().error_count == 1
    assert "bad input 13" in (kernel.telemetry().last_error or "")


async def test_kernel_restart_policy() -> None:
    async def fragile(ctx: Any) -> None:
        while True:
            msg = await ctx.receive()
            if msg.data < 0:
                raise ValueError("negative")
            await ctx.send(msg.respond(msg.data))

    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch(
            "restartable", fragile, restart=RestartPolicy(max_restarts=2, backoff=0)
        )
        await runtime.activate("restartable")
        await runtime.send("restartable", Request(data=-1))
        assert (await kernel.ask(Request(data=5), timeout=LIMIT)).result == 5
        assert kernel.statistics().restarts == 1
        assert kernel.telemetry().error_count == 1


async def test_body_error_cancels_kernels() -> None:
    with pytest.raises(ZeroDivisionError):
        async with RingKernelRuntime() as runtime:
            kernel = await runtime.launch("rk_doubler")
            await runtime.activate("rk_doubler")
            _ = 1 / 0
    assert kernel.kernel_state is KernelState.TERMINATED


async def test_runtime_must_be_entered() -> None:
    runtime = RingKernelRuntime()
    with pytest.raises(LifecycleError, match="async with"):
        await runtime.launch("rk_doubler")
    async with runtime:
        pass
    with pytest.raises(LifecycleError):
        async with runtime:
            pass


async def test_kernel_handle_is_an_actor_ref() -> None:
    async with RingKernelRuntime() as runtime:
        kernel = await runtime.launch("rk_doubler")
        await kernel.resume()  # activate
        assert kernel.alive
        await kernel.tell(Request(data=1))
        assert (await kernel.receive()).result == 2
        await kernel.pause()
        assert kernel.kernel_state is KernelState.DEACTIVATED
        await kernel.resume()
        await kernel.stop(drain=True)
        assert not kernel.alive
        stats = kernel.statistics()
        assert stats.handled == 1
        assert stats.mailbox is not None


def test_decorator_options_and_registry() -> None:
    async def some_kernel(ctx: Any) -> None:
        pass

    definition = ring_kernel(some_kernel)
    assert definition.kernel_id == "some_kernel"
    assert definition.input_queue_size == definition.output_queue_size == 4096
    assert registered_ring_kernels()["some_kernel"] is definition
    sized = ring_kernel(
        kernel_id="sized", input_queue_size=8, output_queue_size=16, auto_register=False
    )(some_kernel)
    assert (sized.input_queue_size, sized.output_queue_size) == (8, 16)
    assert "sized" not in registered_ring_kernels()
    assert sized.__name__ == "some_kernel"
    with pytest.raises(ValueError, match="queue_size"):
        ring_kernel(kernel_id="bad", queue_size=0)(some_kernel)
    with pytest.raises(ValueError, match="backpressure"):
        ring_kernel(kernel_id="bad", backpressure="maybe")(some_kernel)


@pytest.mark.parametrize("seconds", [30, None])
async def test_a_receive_woken_without_a_message_looks_again(seconds: float | None) -> None:
    """A waiting receive (with a long timeout or none) is woken with nothing by
    reactivation (messages were queued meanwhile) and by terminate (the queue is closed):
    it then delivers what came, or ends the kernel, at once."""
    got: list[Any] = []
    waiting = anyio.Event()

    async def patient(ctx: Any) -> None:
        while True:  # no should_terminate check: terminate ends the receive itself
            waiting.set()
            got.append((await ctx.receive(timeout=seconds)).data)

    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime() as runtime:
            await runtime.launch("patient", patient)
            await runtime.activate("patient")
            await waiting.wait()
            await runtime.deactivate("patient")
            await runtime.send("patient", Request(data=1))
            await anyio.wait_all_tasks_blocked()
            assert got == []
            await runtime.reactivate("patient")
            await wait_until(lambda: got == [1])
            await anyio.wait_all_tasks_blocked()  # waiting in receive() again
            await runtime.terminate("patient", timeout=LIMIT)
            assert runtime.get_kernel_state("patient") is KernelState.TERMINATED
