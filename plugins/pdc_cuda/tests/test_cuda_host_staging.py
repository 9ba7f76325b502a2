"""The ring kernel's staging (issue 33): the block copies a run's records together.

A record larger than 16 bytes is not read in place by its thread: the whole block copies
the run's request slots from the ring into a stage with 16-byte loads, the bodies run on
the copies, and the replies are copied out the same way before the heads are published
(``ring_kernel.cu``, "staging"). These tests run the real kernel source on the host build
(``pdc_cuda.testing.HostCudaBackend``): records of 1 byte to 64 KiB, odd sizes and strides
(a request and a reply of different sizes, slots not a multiple of 16 bytes), a record
larger than the shared stage (a heap stage), runs larger than a stage (several chunks),
1, 7 and 64 threads, sequenced and plain input slots, and the staged and in-place forms
forced both ways with ``-DPDC_STAGE``. Every reply must be exactly the body's function of
its own request.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import host_build_marks, load_benchmark
from pdc_cuda.testing import HostCudaBackend

from pdc_core import PersistentKernel, open_persistent_kernel

pytestmark = [*host_build_marks(), pytest.mark.anyio]

#: reply.b[j] = request.b[j % n] + j (mod 256): every reply byte depends on its request.
BODY = """
__device__ int pdc_body(const pdc_request& q, pdc_reply& r) {
    for (unsigned long long j = 0; j < sizeof(r.b); ++j) {
        r.b[j] = static_cast<unsigned char>(q.b[j % sizeof(q.b)] + j);
    }
    return 0;
}
"""


class PlainSlotsBackend(HostCudaBackend):
    """The host build with plain input slots (the kernel polls IN_HEAD)."""

    ring_sequenced_input: ClassVar[bool] = False


def _expected(requests: Any, reply_size: int) -> Any:
    n = requests.shape[1]
    j = np.arange(reply_size)
    return ((requests[:, j % n].astype(np.int64) + j) % 256).astype(np.uint8)


async def _check(
    request_size: int,
    reply_size: int,
    *,
    backend: HostCudaBackend,
    threads: tuple[int, ...] = (1, 7, 64),
    count: int = 20,
    capacity: int = 8,
    options: tuple[str, ...] = (),
) -> None:
    request = np.dtype([("b", "u1", (request_size,))])
    reply = np.dtype([("b", "u1", (reply_size,))])
    kernel = PersistentKernel("staged", request, reply, capacity=capacity)
    kernel.add_body("cuda", BODY)
    rng = np.random.default_rng(request_size * 1000 + reply_size)
    for block in threads:
        async with open_persistent_kernel(
            kernel, backend, threads=block, compile_options=options
        ) as session:
            data = rng.integers(0, 256, (count, request_size), dtype=np.uint8)
            records = np.empty(count, request)
            records["b"] = data
            # a batch: runs of up to the capacity, split at the ring's end
            replies = await session.request_batch(records)
            assert np.array_equal(replies["b"], _expected(data, reply_size)), (block, options)
            # and single records, each a run of one
            for index in (0, count - 1):
                one = await session.request(records[index])
                assert np.array_equal(one["b"], _expected(data[index : index + 1], reply_size)[0])


@pytest.mark.parametrize(
    ("request_size", "reply_size"),
    [
        (1, 1),  # in place by default (at most 16 bytes each)
        (7, 13),  # odd sizes; a 7-byte request and a 13-byte reply slot
        (100, 100),  # many records per shared stage
        (4099, 4097),  # 3 records per shared stage: runs of 8 take several chunks
        (65536, 65536),  # larger than the shared stage: a heap stage
    ],
)
async def test_records_of_any_size_round_trip_staged(request_size: int, reply_size: int) -> None:
    count = 6 if request_size >= 65536 else 20
    await _check(request_size, reply_size, backend=HostCudaBackend(), count=count)


@pytest.mark.parametrize(("request_size", "reply_size"), [(7, 13), (4099, 4097)])
async def test_plain_input_slots_staged(request_size: int, reply_size: int) -> None:
    await _check(request_size, reply_size, backend=PlainSlotsBackend(), threads=(7,))


async def test_small_records_staged_and_large_ones_in_place_when_forced() -> None:
    await _check(8, 8, backend=HostCudaBackend(), threads=(1, 7), options=("-DPDC_STAGE=1",))
    await _check(100, 36, backend=HostCudaBackend(), threads=(7,), options=("-DPDC_STAGE=0",))


async def test_the_floor_benchmark_runs_on_the_host_build() -> None:
    """``benchmarks/cuda_floor.py``'s floor kernel (pdc-cuda's ``MappedFloor``) compiles
    (NVRTC, then g++) and answers every request, by one thread and by the block, and its
    pdc paths run."""
    from pdc_cuda._bench import MappedFloor

    floor_benchmark = load_benchmark("cuda_floor")
    backend = HostCudaBackend()
    floor = MappedFloor(backend)
    for together in (False, True):
        samples = floor_benchmark.floor_samples(floor, 4096, together, 2, 20)
        assert len(samples) == 20
        assert all(sample > 0 for sample in samples)
    options = {"threads": 2}
    results = await floor_benchmark.pdc_paths(backend, 64, 10, options, "asyncio")
    assert {"request, wait=spin", "request, wait=sleep", "actor ask"} <= set(results)
    assert results["calls"] > 0
