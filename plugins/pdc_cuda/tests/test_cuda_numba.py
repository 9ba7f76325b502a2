"""Python kernel bodies on the cuda backend through numba-cuda (``pdc-cuda[numba]``).

Without a GPU: the error naming the extra when numba-cuda is missing, the option
filter, the launch path with a fake numba and a fake CuPy, and -- where numba-cuda is
installed -- the seeds' kernel bodies compiled to PTX by numba-cuda's NVVM (no driver
needed). Where numba-cuda is not installed those tests skip, saying so.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import FakeCupy, fake_backend
from pdc_cuda._numba import (
    compile_python_kernel_ptx,
    jit_options,
    numba_cuda,
    numba_numpy_mismatch,
    run_numba_kernel,
)
from pdc_cuda._streams import CudaStream

import pdc_core.cuda
from pdc_core import Capability, cuda, kernel

HAS_NUMBA_CUDA = importlib.util.find_spec("numba") is not None and (
    importlib.util.find_spec("numba.cuda") is not None
)
requires_numba_cuda = pytest.mark.skipif(
    not HAS_NUMBA_CUDA,
    reason="numba-cuda is not installed (pip install -e 'plugins/pdc_cuda[numba]'): the "
    "PTX compile of Python kernel bodies is not checked",
)


# -- the seeds' bodies (numba.cuda style against pdc_core.cuda) -------------------------


@kernel(block=(256,))
def scale(data, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < len(data):
        out[i] = data[i] * data[i] + 1


@cuda.jit
def reduce_kernel(data, out):  # type: ignore[no-untyped-def]
    shared = cuda.shared.array(256, dtype=np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    shared[tid] = data[i] if i < data.shape[0] else 0
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if tid < step:
            shared[tid] += shared[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        cuda.atomic.add(out, 0, shared[0])


@kernel
def add_one(grid_2d):  # type: ignore[no-untyped-def]
    x, y = cuda.grid(2)
    if x < grid_2d.shape[0] and y < grid_2d.shape[1]:
        grid_2d[x, y] += 1


def test_the_backend_declares_python_kernels():
    assert fake_backend().has(Capability.PYTHON_KERNELS)


def test_missing_numba_cuda_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)
    with pytest.raises(ImportError, match=r"pip install 'pdc-cuda\[numba\]'"):
        numba_cuda()
    with pytest.raises(ImportError, match=r"pip install 'pdc-cuda\[numba\]'"):
        fake_backend().run_python_kernel(scale.py_func, (1, 1, 1), (32, 1, 1), ())
    cuda_13 = r"or with CUDA 13 pip install 'numba-cuda\[cu13\]>=0.30' 'numpy<2.5'"
    with pytest.raises(ImportError, match=cuda_13):
        numba_cuda()


def test_only_numba_jit_keywords_are_passed_on():
    assert jit_options({"fastmath": True, "cpu_mode": "lanes", "lineinfo": True}) == {
        "fastmath": True,
        "lineinfo": True,
    }
    assert jit_options(None) == {}


class _FakeNumbaCuda:
    """The slice of ``numba.cuda`` the launch path uses; records launches."""

    def __init__(self) -> None:
        self.launches: list[tuple[Any, ...]] = []

    def legacy_default_stream(self) -> str:
        return "legacy"

    def external_stream(self, ptr: int) -> str:
        return f"external:{ptr:#x}"

    def is_cuda_array(self, value: Any) -> bool:
        return hasattr(value, "__cuda_array_interface__")

    def as_cuda_array(self, value: Any, sync: bool = True) -> Any:
        assert sync is False
        return ("device", value)


class _Dispatcher:
    def __init__(self, fake: _FakeNumbaCuda, options: dict[str, Any]) -> None:
        self.fake = fake
        self.options = options

    def __getitem__(self, config: tuple[Any, ...]) -> Any:
        def launch(*args: Any) -> None:
            self.fake.launches.append((*config, args, self.options))

        return launch


class _DeviceArray:
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (1, False)}  # noqa: RUF012


def test_launch_path_with_fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_numba = _FakeNumbaCuda()
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr("pdc_cuda._numba.numba_cuda", lambda: fake_numba)
    monkeypatch.setattr(
        pdc_core.cuda, "to_numba", lambda body, **options: _Dispatcher(fake_numba, options)
    )
    backend = fake_backend()
    array = _DeviceArray()
    run_numba_kernel(
        backend, scale.py_func, (4, 1, 1), (256, 1, 1), (array, np.float32(2)),
        options={"fastmath": True, "cpu_mode": "lanes"},
    )  # fmt: skip
    grid, block, stream, shared, args, options = fake_numba.launches[-1]
    assert (grid, block, stream, shared) == ((4, 1, 1), (256, 1, 1), "legacy", 0)
    assert args == (("device", array), np.float32(2))
    assert options == {"fastmath": True}
    assert cupy.log == [("event.record", 0), ("event.synchronize", 0)]  # waited: no stream
    cupy.log.clear()
    stream = CudaStream(backend, cupy.stream(0x70))
    run_numba_kernel(backend, scale.py_func, (1,), (32,), (), shared_mem=64, stream=stream)
    assert fake_numba.launches[-1][:4] == ((1, 1, 1), (32, 1, 1), "external:0x70", 64)
    assert cupy.log == []  # queued on the stream: no wait
    run_numba_kernel(backend, scale.py_func, (0,), (32,), ())  # empty grid: nothing
    assert len(fake_numba.launches) == 2
    with pytest.raises(ValueError, match="2048"):
        run_numba_kernel(backend, scale.py_func, (1,), (2048,), ())


@requires_numba_cuda
@pytest.mark.parametrize("cc", [(7, 5), (8, 0), (9, 0)])  # CUDA 13 dropped 7.0 and 7.2
def test_seed_bodies_compile_to_ptx_without_a_gpu(cc: tuple[int, int]) -> None:
    target = f".target sm_{cc[0]}{cc[1]}"
    ptx = compile_python_kernel_ptx(
        scale.py_func, "void(float32[:], float32[:])", compute_capability=cc
    )
    assert target in ptx
    assert ".entry" in ptx
    ptx = compile_python_kernel_ptx(
        reduce_kernel.py_func, "void(float32[:], float32[:])", compute_capability=cc,
        options={"fastmath": True, "cpu_mode": "lanes"},
    )  # fmt: skip
    assert ".shared" in ptx
    assert "bar.sync" in ptx or "barrier.sync" in ptx
    assert "atom." in ptx or "red." in ptx
    ptx = compile_python_kernel_ptx(add_one.py_func, "void(int32[:, :])", compute_capability=cc)
    assert target in ptx


@requires_numba_cuda
def test_a_body_with_a_type_error_fails_to_compile_naming_it() -> None:
    @kernel
    def broken(data):  # type: ignore[no-untyped-def]
        i = cuda.grid(1)
        data[i] = "text"

    with pytest.raises(Exception, match=r"No implementation of function.*setitem"):
        compile_python_kernel_ptx(broken.py_func, "void(float32[:])")


def test_a_numba_cuda_that_needs_an_older_numpy_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba-cuda 0.30.4 registers an overload of numpy.row_stack, gone in NumPy 2.5:
    every compile then failed with an AttributeError from deep inside numba-cuda. Now
    one ImportError names both versions and the range the extra declares."""
    import pdc_cuda._numba as numba_module

    real_import = importlib.import_module

    def import_module(name: str, package: str | None = None) -> Any:
        if name == "numba.cuda.np.arrayobj":
            raise AttributeError("module 'numpy' has no attribute 'row_stack'")
        return real_import(name, package)

    monkeypatch.setattr(numba_module, "_numpy_checked", False)
    monkeypatch.setattr(numba_module.importlib, "import_module", import_module)
    reason = numba_module.numba_numpy_mismatch()
    assert reason is not None
    assert f"NumPy {np.__version__}" in reason
    assert "numba-cuda " in reason
    assert "row_stack" in reason
    assert "numpy<2.5" in reason
    if HAS_NUMBA_CUDA:
        with pytest.raises(ImportError, match=r"numpy\.row_stack.*numpy<2\.5"):
            numba_cuda()


@requires_numba_cuda
def test_the_installed_numba_cuda_and_numpy_agree() -> None:
    assert numba_numpy_mismatch() is None  # NumPy here still has row_stack


def test_the_numba_extra_declares_the_numpy_range() -> None:
    import tomllib
    from pathlib import Path

    from pdc_cuda._numba import NUMPY_RANGE

    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    extra = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]["numba"]
    assert NUMPY_RANGE in extra
