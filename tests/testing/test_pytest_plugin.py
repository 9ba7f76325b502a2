import sniffio

seen: list[str] = []


async def test_runs_under_each_async_library(anyio_backend: str) -> None:
    assert sniffio.current_async_library() == anyio_backend
    seen.append(anyio_backend)


def test_both_async_libraries_ran() -> None:
    assert sorted(seen) == ["asyncio", "trio"]
