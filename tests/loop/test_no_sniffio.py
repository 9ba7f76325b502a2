"""pdc_core runs without sniffio: anyio 4.16 no longer installs it, and the GPU image lacks it.

Under asyncio it is made unimportable. trio itself (and anyio, where sniffio is present)
still use it, so under trio every call of ``sniffio.current_async_library`` made from a
pdc_core module fails the test instead.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent(
    """
    import sys

    library = sys.argv[1]
    if library == "asyncio":
        sys.modules["sniffio"] = None  # `import sniffio` now raises ImportError
    else:
        import sniffio

        original = sniffio.current_async_library

        def guarded():
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("pdc_core"):
                raise AssertionError(f"{caller} asked sniffio")
            return original()

        sniffio.current_async_library = guarded

    import anyio
    import numpy as np

    import pdc_core


    async def double(message):
        return 2 * message


    REPLY = np.dtype([("y", np.float64)])


    def twice(requests):
        replies = np.empty(len(requests), REPLY)
        replies["y"] = 2 * requests["x"]
        return replies


    kernel = pdc_core.PersistentKernel(
        "nosniff", np.dtype([("x", np.float64)]), REPLY, capacity=8, bodies={"cpu": twice}
    )


    async def main():
        async with pdc_core.open_nursery() as nursery:
            ref = await nursery.start_actor(double)
            assert await ref.ask(21) == 42
            resident = await nursery.start_actor(pdc_core.PersistentKernelActor(kernel, "cpu"))
            assert float((await resident.ask((1.5,)))["y"]) == 3.0
        print("ok", library)


    anyio.run(main, backend=library)
    """
)


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_asks_run_without_sniffio(library: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, library], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok {library}"
