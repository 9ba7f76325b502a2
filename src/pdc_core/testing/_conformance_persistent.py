"""The conformance kit's persistent-kernel checks (a role of ``BackendConformance``).

With ``PERSISTENT_KERNELS``: one request, batches across the ring's wrap, pause and
resume, a drain stop that answers everything published, a stop now that answers
nothing more, a body error surfacing as :class:`~pdc_core.ActorCrashed`, and
device-resident state read back. The kernels come from three hooks
(:meth:`PersistentKernelChecks.persistent_kernel`, ``failing_persistent_kernel``,
``stateful_persistent_kernel``) whose defaults have host bodies.
"""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import (
    ActorCrashed,
    ActorStopped,
    PersistentKernel,
    PersistentKernelError,
    PersistentKernelSession,
    SessionState,
)
from pdc_core.backend import Backend, Capability, ErrorCode

from ._conformance_base import ConformanceBase

__all__ = ["PersistentKernelChecks"]


def _state(session: PersistentKernelSession) -> SessionState:
    """The session's state, read afresh (not narrowed by an earlier check)."""
    return session.state


# -- the default persistent kernel: a host body ------------------------------------------

#: The request and reply dtype of the kit's persistent kernel: one ``float32`` each.
_PERSISTENT_DTYPE = np.dtype(np.float32)


def _affine(requests: Any) -> Any:
    """Reply ``2 * x + 1`` to each request ``x``: NumPy arrays, MLX arrays, ... alike."""
    return requests * 2 + 1


def _failing(requests: Any) -> Any:
    raise RuntimeError("conformance: the body reports an error")


#: The initial state of the kit's stateful kernel: (sum of requests, count of requests).
_INITIAL_STATE = np.array([0.5, 0.0], dtype=np.float32)


def _accumulate(requests: Any, state: Any) -> Any:
    """Reply ``2 * x + 1`` and add each request to ``state[0]``, one to ``state[1]``,
    updating the state in place (the host body's convention)."""
    state[0] += requests.sum()
    state[1] += len(requests)
    return requests * 2 + 1


class PersistentKernelChecks(ConformanceBase):
    """A kernel run through the backend's resident kernel, from the three hooks."""

    # -- hooks for the kernel checks -------------------------------------------------

    def persistent_kernel(self, backend: Backend) -> PersistentKernel | None:
        """The kernel the persistent checks run, or ``None`` to skip them.

        It must take ``float32`` requests and answer each ``x`` with the ``float32``
        ``2 * x + 1``, with a capacity of 8. The default has a host body (a Python
        callable on the array of requests) registered under the backend's name: what
        ``HostWorkerKernel`` backends run. Override it for another body format.
        """
        return PersistentKernel(
            "conformance_affine", _PERSISTENT_DTYPE, _PERSISTENT_DTYPE, capacity=8
        ).add_body(backend.name, _affine)

    def failing_persistent_kernel(self, backend: Backend) -> PersistentKernel | None:
        """A kernel like :meth:`persistent_kernel` whose body reports an error on every
        batch (through the error word), or ``None`` to skip that check."""
        return PersistentKernel(
            "conformance_failing", _PERSISTENT_DTYPE, _PERSISTENT_DTYPE, capacity=8
        ).add_body(backend.name, _failing)

    def stateful_persistent_kernel(self, backend: Backend) -> PersistentKernel | None:
        """A kernel like :meth:`persistent_kernel` launched with state, or ``None`` to
        skip that check. Its initial state is ``float32 [0.5, 0]``; for each request
        ``x`` the body adds ``x`` to ``state[0]`` and one to ``state[1]``, in the
        backend's device-resident state, and answers ``2 * x + 1``. The default has a
        host body that updates the NumPy state array it is given in place."""
        return PersistentKernel(
            "conformance_stateful",
            _PERSISTENT_DTYPE,
            _PERSISTENT_DTYPE,
            capacity=8,
            state=_INITIAL_STATE,
        ).add_body(backend.name, _accumulate)

    async def _start(
        self, backend: Backend, failing: bool = False, stateful: bool = False
    ) -> PersistentKernelSession:
        if not backend.has(Capability.PERSISTENT_KERNELS):
            pytest.skip(f"the {backend.name} backend declares no persistent kernels")
        hook = (
            self.failing_persistent_kernel
            if failing
            else self.stateful_persistent_kernel
            if stateful
            else self.persistent_kernel
        )
        spec = hook(backend)
        if spec is None:
            kind = "failing " if failing else "stateful " if stateful else ""
            pytest.skip(
                f"no {kind}persistent kernel for the {backend.name} "
                f"backend: override {hook.__name__}() to give one in its body format"
            )
        default = getattr(type(self), hook.__name__) is getattr(
            PersistentKernelChecks, hook.__name__
        )
        try:
            return await PersistentKernelSession.start(
                spec, backend, launch_timeout=self.timeout, stop_timeout=self.timeout
            )
        except TypeError as exc:
            if default and backend.device_info.kind != "cpu":
                pytest.skip(
                    f"the {backend.name} backend does not run the kit's host body ({exc}); "
                    f"override {hook.__name__}() to give one in its body format"
                )
            raise

    def _requests(self, start: int, count: int) -> np.ndarray[Any, Any]:
        return np.arange(start, start + count, dtype=np.float32)

    async def test_persistent_kernel_request(self, backend: Backend) -> None:
        """One request is answered by the resident kernel, and the session stops
        cleanly with one sent and one replied. Cancelled, it still stops the session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                reply = await session.request(np.float32(3.5))
                assert float(reply) == 8.0
                assert _state(session) is SessionState.RUNNING
        finally:
            await session.stop()
        assert _state(session) is SessionState.STOPPED
        assert session.statistics().sent == session.statistics().replied == 1

    async def test_persistent_kernel_batches(self, backend: Backend) -> None:
        """Batches larger than the ring are answered in order, by ``request_batch`` and
        by ``send_batch`` waiting for room while another task receives. Cancelled, it
        still stops the session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                requests = self._requests(0, 3 * session.capacity + 5)  # wraps the ring
                replies = await session.request_batch(requests)
                np.testing.assert_array_equal(replies, requests * 2 + 1)
                sent = self._requests(100, 2 * session.capacity + 1)
                got: list[float] = []
                async with anyio.create_task_group() as tg:  # sends wait for room
                    tg.start_soon(session.send_batch, sent)
                    while len(got) < len(sent):
                        got.extend(np.asarray(await session.receive_batch()).tolist())
                assert got == (sent * 2 + 1).tolist()
        finally:
            await session.stop()

    async def test_persistent_kernel_pause_and_resume(self, backend: Backend) -> None:
        """A paused kernel acknowledges the pause and answers nothing; resumed, it
        answers what was sent meanwhile, in order. Cancelled, it still stops the
        session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                await session.pause()
                assert _state(session) is SessionState.PAUSED
                assert session.resident.paused
                await session.send_batch(self._requests(0, 3))
            with anyio.move_on_after(0.05):
                await session.receive()
                pytest.fail("a paused kernel answered a request", pytrace=False)
            assert session.statistics().replied == 0
            with anyio.fail_after(self.timeout):
                await session.resume()
                assert _state(session) is SessionState.RUNNING
                got: list[float] = []
                while len(got) < 3:
                    got.extend(np.asarray(await session.receive_batch()).tolist())
                assert got == [1.0, 3.0, 5.0]
        finally:
            await session.stop()

    async def test_persistent_kernel_drain_stop_answers_everything(self, backend: Backend) -> None:
        """``stop(drain=True)`` of a paused kernel answers every request sent before it;
        the replies can still be received, then ``receive`` raises ``ActorStopped``.
        Cancelled, it still stops the session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                await session.pause()  # a drain overrides the pause
                requests = self._requests(0, session.capacity)
                await session.send_batch(requests)
        finally:
            await session.stop(drain=True)
        stats = session.statistics()
        assert (stats.sent, stats.replied, stats.unprocessed) == (len(requests), len(requests), 0)
        replies = np.asarray(await session.receive_batch())
        np.testing.assert_array_equal(replies, requests * 2 + 1)
        with pytest.raises(ActorStopped):
            await session.receive()

    async def test_persistent_kernel_stop_now(self, backend: Backend) -> None:
        """``stop()`` without drain leaves requests published to a paused kernel
        unprocessed (counted), and later calls raise ``ActorStopped``. Cancelled, it
        still stops the session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                assert float(await session.request(np.float32(1.0))) == 3.0
                await session.pause()  # nothing published from here on is consumed
                await session.send_batch(self._requests(0, 4))
        finally:
            await session.stop()
        assert _state(session) is SessionState.STOPPED
        stats = session.statistics()
        assert (stats.sent, stats.replied, stats.unprocessed) == (5, 1, 4)
        with pytest.raises(ActorStopped):
            await session.receive()
        with pytest.raises(ActorStopped):
            await session.request(np.float32(2.0))

    async def test_persistent_kernel_error_word(self, backend: Backend) -> None:
        """A body that fails sets the error word: the request gets ``ActorCrashed``
        caused by a ``PersistentKernelError`` with its code, the session is CRASHED and
        refuses further requests. Cancelled, it still stops the session."""
        session = await self._start(backend, failing=True)
        try:
            with anyio.fail_after(self.timeout), pytest.raises(ActorCrashed) as info:
                await session.request(np.float32(1.0))
            error = info.value.cause
            assert isinstance(error, PersistentKernelError)
            assert error.code != ErrorCode.NONE, "the crash did not come from the error word"
            assert _state(session) is SessionState.CRASHED
            with pytest.raises(ActorCrashed):
                await session.request(np.float32(2.0))
        finally:
            await session.stop()

    async def test_persistent_kernel_state(self, backend: Backend) -> None:
        """A kernel launched with state (the backend's ``make_state``) updates it from
        its body batch after batch; ``read_state()`` gives a NumPy copy of it, of the
        state's shape and dtype, while paused and after the stop. Cancelled, it still
        stops the session."""
        session = await self._start(backend, stateful=True)
        try:
            with anyio.fail_after(self.timeout):
                assert float(await session.request(np.float32(3.0))) == 7.0
                requests = self._requests(1, 2 * session.capacity + 3)  # wraps the ring
                replies = await session.request_batch(requests)
                np.testing.assert_array_equal(replies, requests * 2 + 1)
                await session.pause()
                state = session.read_state()
                expected = [0.5 + 3.0 + float(requests.sum()), 1.0 + len(requests)]
                assert isinstance(state, np.ndarray), f"read_state() gave {type(state)}"
                assert (state.shape, state.dtype) == (_INITIAL_STATE.shape, _INITIAL_STATE.dtype)
                assert state.tolist() == expected, "the body's updates are not in the state"
                state[...] = -1  # a copy: writing it changes nothing on the device
                await session.resume()
                assert float(await session.request(np.float32(2.0))) == 5.0
        finally:
            await session.stop()
        final = session.read_state()
        assert isinstance(final, np.ndarray)
        assert final.tolist() == [expected[0] + 2.0, expected[1] + 1.0]
