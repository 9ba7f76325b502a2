"""Testing pdc with pytest, as users do: user-style test modules run in-process by pytester.

They run with anyio's pytest plugin alone (no pdc hook marks or parametrizes
anything), with pdc's plugin for its fixtures, and beside pytest-asyncio in either of
its modes. Nothing of this repository's conftest.py files reaches them.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).parents[2]
PDC_PLUGIN = "pdc_core.testing.pytest_plugin"
HAS_PYTEST_ASYNCIO = importlib.util.find_spec("pytest_asyncio") is not None
needs_pytest_asyncio = pytest.mark.skipif(
    not HAS_PYTEST_ASYNCIO, reason="pytest-asyncio is not installed"
)

# Without pytest-asyncio: anyio's plugin (always there: it ships with anyio) alone.
ANYIO_ONLY = ("-p", "no:asyncio", "-p", PDC_PLUGIN)

USER_MODULE = """
import anyio
import pytest
import sniffio

from pdc_core import open_nursery

pytestmark = pytest.mark.anyio
seen = []


async def double(message):
    return 2 * message


@pytest.fixture(scope="module")
async def module_doubler(anyio_backend):
    # One nursery for the whole module per backend: its actor serves every test. A
    # fixture wider than a function names anyio_backend, so that pytest sets it up
    # again (on the new event loop) when the backend changes.
    async with open_nursery() as nursery:
        yield await nursery.start_actor(double, name="doubler")


@pytest.fixture
async def doubler():
    async with open_nursery() as nursery:
        yield await nursery.start_actor(double)


async def test_function_scoped_nursery(doubler, anyio_backend):
    assert sniffio.current_async_library() == anyio_backend
    assert await doubler.ask(2) == 4


async def test_module_scoped_nursery(module_doubler, anyio_backend):
    assert await module_doubler.ask(3) == 6
    seen.append(anyio_backend)


async def test_module_scoped_nursery_again(module_doubler):
    assert await module_doubler.ask(4) == 8


async def test_nursery_in_the_body():
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(double)
        with anyio.fail_after(5):
            assert await ref.ask(5) == 10


def test_both_backends_ran():
    assert sorted(seen) == ["asyncio", "trio"]
"""


def _backends_ran(result: pytest.RunResult, name: str) -> None:
    result.stdout.fnmatch_lines([f"*::{name}?asyncio? PASSED*", f"*::{name}?trio? PASSED*"])


def test_anyio_plugin_alone_runs_nurseries_under_asyncio_and_trio(
    pytester: pytest.Pytester,
) -> None:
    """anyio's default ``anyio_backend`` is module-scoped: module-scoped async fixtures work."""
    pytester.makepyfile(test_user=USER_MODULE)
    result = pytester.runpytest("-p", "no:asyncio", "-v")
    result.assert_outcomes(passed=9)
    for name in ("test_function_scoped_nursery", "test_module_scoped_nursery"):
        _backends_ran(result, name)


def test_session_scoped_nursery_with_a_session_scoped_anyio_backend(
    pytester: pytest.Pytester,
) -> None:
    """A session-scoped async fixture needs ``anyio_backend`` of session scope."""
    pytester.makeconftest(
        """
        import pytest

        from pdc_core import open_nursery


        @pytest.fixture(scope="session", params=["asyncio", "trio"])
        def anyio_backend(request):
            return request.param


        async def double(message):
            return 2 * message


        @pytest.fixture(scope="session")
        async def shared_doubler(anyio_backend):
            async with open_nursery() as nursery:
                yield await nursery.start_actor(double)
        """
    )
    pytester.makepyfile(
        test_a="""
        import pytest

        pytestmark = pytest.mark.anyio


        async def test_a(shared_doubler):
            assert await shared_doubler.ask(1) == 2
        """,
        test_b="""
        import pytest
        import sniffio


        @pytest.mark.anyio
        async def test_b(shared_doubler, anyio_backend):
            assert sniffio.current_async_library() == anyio_backend
            assert await shared_doubler.ask(2) == 4
        """,
    )
    result = pytester.runpytest("-p", "no:asyncio", "-v")
    result.assert_outcomes(passed=4)
    _backends_ran(result, "test_b")


PDC_FIXTURES_MODULE = """
import asyncio

import pytest
import sniffio

from pdc_core import ActorNursery, Request, Response, RingKernelRuntime, ring_kernel

pytestmark = pytest.mark.anyio


async def double(message):
    return 2 * message


async def test_actor_nursery(actor_nursery, anyio_backend):
    assert isinstance(actor_nursery, ActorNursery)
    assert sniffio.current_async_library() == anyio_backend
    ref = await actor_nursery.start_actor(double)
    assert await ref.ask(21) == 42


@ring_kernel(kernel_id="add_one")
async def add_one(ctx):
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.1)
        except asyncio.TimeoutError:
            continue
        await ctx.send(Response(result=msg.data + 1, correlation_id=msg.message_id))


async def test_ring_kernel_runtime(ring_kernel_runtime):
    assert isinstance(ring_kernel_runtime, RingKernelRuntime)
    await ring_kernel_runtime.launch("add_one")
    await ring_kernel_runtime.activate("add_one")
    await ring_kernel_runtime.send("add_one", Request(data=1))
    response = await ring_kernel_runtime.receive("add_one", timeout=5.0)
    assert response.result == 2

"""


def test_pdc_fixtures_under_asyncio_and_trio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fixtures=PDC_FIXTURES_MODULE)
    result = pytester.runpytest(*ANYIO_ONLY, "-v")
    result.assert_outcomes(passed=4)
    for name in ("test_actor_nursery", "test_ring_kernel_runtime"):
        _backends_ran(result, name)


CRASH_MODULE = """
import pytest

from pdc_core import ActorCrashed

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


async def crash(message):
    raise ValueError("boom")


async def double(message):
    return 2 * message


async def test_crash_during_the_test(actor_nursery):
    ref = await actor_nursery.start_actor(crash)
    with pytest.raises(ActorCrashed):
        await ref.ask(1)


async def test_crash_while_draining(actor_nursery):
    ref = await actor_nursery.start_actor(crash)
    await ref.tell(1)


async def test_the_runner_still_runs_tests(actor_nursery):
    ref = await actor_nursery.start_actor(double)
    assert await ref.ask(21) == 42
"""


def test_a_crash_in_the_fixture_nursery_fails_the_test_at_teardown(
    pytester: pytest.Pytester,
) -> None:
    """Under asyncio and trio: the crash is a teardown error, and later tests still run.

    The nursery used to be entered in the task anyio's runner runs tests in, so the
    crash cancelled the runner itself (trio: the teardown never returned; asyncio: a
    ClosedResourceError). In a subprocess with a timeout, so a hang fails the test.
    """
    pytester.makepyfile(test_crash=CRASH_MODULE)
    result = pytester.runpytest_subprocess(*ANYIO_ONLY, "-v", timeout=120)
    result.assert_outcomes(passed=6, errors=4)
    for backend in ("asyncio", "trio"):
        result.stdout.fnmatch_lines(
            [
                f"*ERROR at teardown of test_crash_during_the_test?{backend}?*",
                "*ValueError: boom*",
                "*ActorCrashed: actor*crashed: ValueError: boom*",
            ]
        )
        result.stdout.fnmatch_lines(
            [f"*ERROR at teardown of test_crash_while_draining?{backend}?*"]
        )
    _backends_ran(result, "test_the_runner_still_runs_tests")
    result.stdout.no_fnmatch_line("*ClosedResourceError*")


def test_a_crash_in_the_fixture_runtime_fails_the_test_at_teardown(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_runtime_crash="""
        import pytest

        from pdc_core import Request, ring_kernel

        pytestmark = pytest.mark.anyio


        @pytest.fixture(params=["asyncio", "trio"])
        def anyio_backend(request):
            return request.param


        @ring_kernel(kernel_id="broken")
        async def broken(ctx):
            await ctx.receive(timeout=5)
            raise ValueError("kernel boom")


        async def test_kernel_crashes(ring_kernel_runtime):
            await ring_kernel_runtime.launch("broken")
            await ring_kernel_runtime.activate("broken")
            await ring_kernel_runtime.send("broken", Request(data=1))


        async def test_the_runner_still_runs_tests(ring_kernel_runtime):
            assert ring_kernel_runtime.kernel_ids == []
        """
    )
    result = pytester.runpytest_subprocess(*ANYIO_ONLY, "-v", timeout=120)
    result.assert_outcomes(passed=4, errors=2)
    for backend in ("asyncio", "trio"):
        result.stdout.fnmatch_lines(
            [f"*ERROR at teardown of test_kernel_crashes?{backend}?*", "*ValueError: kernel boom*"]
        )
    _backends_ran(result, "test_the_runner_still_runs_tests")
    result.stdout.no_fnmatch_line("*ClosedResourceError*")


def test_pdc_plugin_marks_and_parametrizes_nothing(pytester: pytest.Pytester) -> None:
    """An un-marked async test is left to whichever async plugin claims it (none here)."""
    pytester.makepyfile(
        """
        async def test_unmarked():
            pass

        def test_sync():
            pass
        """
    )
    result = pytester.runpytest(*ANYIO_ONLY, "-v")
    result.stdout.fnmatch_lines(["*::test_unmarked FAILED*", "*::test_sync PASSED*"])
    result.stdout.no_fnmatch_line("*[[]trio[]]*")


def test_importing_anyio_backend_still_runs_a_module_under_both(
    pytester: pytest.Pytester,
) -> None:
    """pdc <= 0.2 had modules import ``anyio_backend`` from the plugin; that still works."""
    pytester.makepyfile(
        """
        import pytest
        import sniffio

        from pdc_core.testing.pytest_plugin import anyio_backend  # noqa: F401

        pytestmark = pytest.mark.anyio


        async def test_it(anyio_backend):
            assert sniffio.current_async_library() == anyio_backend
        """
    )
    result = pytester.runpytest(*ANYIO_ONLY, "-v")
    result.assert_outcomes(passed=2)
    _backends_ran(result, "test_it")


def test_plugin_module_defines_no_anyio_backend_fixture() -> None:
    """Registered as a plugin, the module must not override anyio's ``anyio_backend``."""
    import pdc_core.testing.pytest_plugin as plugin

    assert "anyio_backend" not in dir(plugin)
    assert not hasattr(plugin, "pytest_pycollect_makeitem")


def test_testing_extra_and_pytest11_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert any(req.startswith("pytest") for req in project["optional-dependencies"]["testing"])
    entry_points = project["entry-points"]["pytest11"]
    # Named after the module, so a conftest.py still saying
    # ``pytest_plugins = ["pdc_core.testing.pytest_plugin"]`` is a no-op, not a clash.
    assert entry_points == {PDC_PLUGIN: PDC_PLUGIN}
    assert importlib.util.find_spec(PDC_PLUGIN) is not None


def test_pytest_plugins_line_beside_the_entry_point_is_harmless(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(f"pytest_plugins = [{PDC_PLUGIN!r}]")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.anyio
        async def test_it(actor_nursery):
            pass
        """
    )
    result = pytester.runpytest(*ANYIO_ONLY)
    result.assert_outcomes(passed=2)


ASYNCIO_MODULE = """
import asyncio

from pdc_core import open_nursery


async def double(message):
    return 2 * message


async def test_plain_asyncio_test():
    # pytest-asyncio sets up and tears down an async-generator fixture in two tasks, and
    # a nursery must close in the task that opened it: open it in the test body.
    loop = asyncio.get_running_loop()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(double)
        assert await ref.ask(3) == 6
    assert asyncio.get_running_loop() is loop
"""


@needs_pytest_asyncio
def test_beside_pytest_asyncio_in_auto_mode(pytester: pytest.Pytester) -> None:
    """In auto mode pytest-asyncio owns every async test and fixture, pdc's included."""
    pytester.makepyfile(test_asyncio_user=ASYNCIO_MODULE)
    result = pytester.runpytest(
        "-p",
        PDC_PLUGIN,
        "-o",
        "asyncio_mode=auto",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    )
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*attached to a different loop*")


@needs_pytest_asyncio
def test_beside_pytest_asyncio_in_strict_mode(pytester: pytest.Pytester) -> None:
    """In strict mode each plugin runs the tests marked for it, pdc's fixtures included."""
    pytester.makepyfile(
        test_user=USER_MODULE,
        test_strict="""
        import asyncio

        import pytest

        from pdc_core import open_nursery


        async def double(message):
            return 2 * message


        @pytest.mark.asyncio
        async def test_marked_asyncio():
            asyncio.get_running_loop()
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(double)
                assert await ref.ask(2) == 4


        @pytest.mark.anyio
        async def test_marked_anyio(actor_nursery):
            ref = await actor_nursery.start_actor(double)
            assert await ref.ask(3) == 6
        """,
    )
    result = pytester.runpytest(
        "-p",
        PDC_PLUGIN,
        "-o",
        "asyncio_mode=strict",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
        "-v",
    )
    result.assert_outcomes(passed=12)
    _backends_ran(result, "test_marked_anyio")
    result.stdout.fnmatch_lines(["*::test_marked_asyncio PASSED*"])
