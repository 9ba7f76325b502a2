"""``pdc_core.compilation.cache.KernelCache`` trusts nothing in its directory.

Each test plants what a stranger (or a stale file) could leave there: an index naming
files outside the cache, links at entry files, at the index and at a temporary name, a
directory that others can write or that someone else owns; and names that would leave
the cache. Nothing outside the cache is read, written or deleted.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from pdc_core._pydotcompute.compilation import cache as cache_module
from pdc_core.compilation.cache import KernelCache

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="modes and links of POSIX")


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's outside the cache, that nothing may read, change or delete."""
    path = tmp_path / "victim.txt"
    path.write_bytes(b"the user's secret")
    return path


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    return path


def test_the_default_directory_is_private_under_the_user_s_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    directory = Path(KernelCache().get_stats()["cache_dir"])
    assert directory.name == "pydotcompute_cache"
    base = tmp_path / ("home" if sys.platform == "darwin" else "xdg")
    assert base in directory.parents
    assert Path(tempfile.gettempdir()) / "pydotcompute_cache" != directory
    if sys.platform != "win32":
        assert directory.stat().st_mode & 0o777 == 0o700


@posix_only
def test_without_xdg_cache_home_the_default_is_under_home_s_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = "Library/Caches" if sys.platform == "darwin" else ".cache"
    assert cache_module._user_cache_dir() == tmp_path / expected


@posix_only
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_directory_others_can_write_is_refused(cache_dir: Path, mode: int) -> None:
    cache_dir.chmod(mode)
    try:
        with pytest.raises(PermissionError, match=f"{cache_dir.name}.*can be written by others"):
            KernelCache(cache_dir)
    finally:
        cache_dir.chmod(0o700)
    assert list(cache_dir.iterdir()) == []  # nothing read or written there


@posix_only
def test_a_directory_someone_else_owns_is_refused(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = cache_dir.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    with pytest.raises(PermissionError, match=f"belongs to uid {owner}, not to this user"):
        KernelCache(cache_dir)


def test_a_planted_index_never_names_a_file_outside_the_cache(
    cache_dir: Path, victim: Path
) -> None:
    honest = KernelCache(cache_dir)
    key = honest._get_cache_key("k", "h")
    fields: dict[str, object] = {
        "kernel_name": "k",
        "source_hash": "h",
        "signature": None,
        "ptx_path": str(victim),
        "metadata": {},
        "created_timestamp": 1.0,
        "last_accessed": 1.0,
        "hit_count": 0,
    }
    planted = {key: fields, "evil": {**fields, "kernel_name": "e"}}
    (cache_dir / "index.json").write_text(json.dumps(planted))
    with pytest.warns(RuntimeWarning, match="dropped 1 entries"):
        cache = KernelCache(cache_dir)
    assert cache.load("k", "h") is None  # its derived file is missing: never the victim
    assert not cache.contains("k", "h")
    KernelCache(cache_dir).clear()
    assert victim.read_bytes() == b"the user's secret"


@posix_only
def test_a_link_at_an_entry_s_file_is_replaced_by_store_and_refused_by_load(
    cache_dir: Path, victim: Path
) -> None:
    cache = KernelCache(cache_dir)
    entry_file = cache._get_ptx_path(cache._get_cache_key("k", "h"))
    entry_file.symlink_to(victim)
    cache.store("k", "h", b"kernel code")
    assert victim.read_bytes() == b"the user's secret"
    assert not entry_file.is_symlink()
    assert cache.load("k", "h") == b"kernel code"

    entry_file.unlink()
    entry_file.symlink_to(victim)  # planted after the store
    with pytest.warns(RuntimeWarning, match="not a regular file"):
        assert cache.load("k", "h") is None
    assert not cache.contains("k", "h")
    assert victim.read_bytes() == b"the user's secret"


@posix_only
@pytest.mark.parametrize("name", ["index.json", "index.json.tmp"])
def test_a_link_at_the_index_or_its_temporary_name_is_never_written_through(
    cache_dir: Path, victim: Path, name: str
) -> None:
    (cache_dir / name).symlink_to(victim)
    if name == "index.json":
        with pytest.warns(RuntimeWarning, match="unreadable"):
            cache = KernelCache(cache_dir)  # the victim is not read as the index
    else:
        cache = KernelCache(cache_dir)
    cache.store("k", "h", b"kernel code")
    cache.clear()
    assert victim.read_bytes() == b"the user's secret"
    assert not (cache_dir / "index.json").is_symlink()


@pytest.mark.parametrize(
    ("kernel_name", "source_hash", "named"),
    [
        ("../../x", "h", "kernel_name '../../x'"),
        ("a/b", "h", "kernel_name 'a/b'"),
        ("..", "h", "kernel_name '..'"),
        ("k", "../h", "source_hash '../h'"),
        ("k", "x\\y", "source_hash 'x\\\\\\\\y'"),
    ],
)
def test_a_name_that_would_leave_the_cache_is_a_value_error_naming_it(
    cache_dir: Path, kernel_name: str, source_hash: str, named: str
) -> None:
    cache = KernelCache(cache_dir)
    with pytest.raises(ValueError, match=named):
        cache.store(kernel_name, source_hash, b"x")
    for call in (cache.load, cache.contains, cache.remove):
        with pytest.raises(ValueError, match=named):
            call(kernel_name, source_hash)
    assert list(cache_dir.parent.rglob("x")) == []


def test_a_name_that_is_not_a_str_is_a_type_error(cache_dir: Path) -> None:
    with pytest.raises(TypeError, match="kernel_name must be a str, got int 3"):
        KernelCache(cache_dir).store(3, "h", b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ptx must be bytes or str, got int"):
        KernelCache(cache_dir).store("k", "h", 5)  # type: ignore[arg-type]


def test_names_that_join_alike_are_two_entries(cache_dir: Path) -> None:
    cache = KernelCache(cache_dir)
    cache.store("a_b", "c", b"first")
    cache.store("a", "b_c", b"second")
    assert cache.load("a_b", "c") == b"first"
    assert cache.load("a", "b_c") == b"second"


@pytest.mark.parametrize("argument", ["max_entries", "max_size_mb"])
@pytest.mark.parametrize("value", [True, 1.5, 2.0, "2", None])
def test_the_bounds_follow_the_integer_rule(cache_dir: Path, argument: str, value: object) -> None:
    with pytest.raises(TypeError, match=f"{argument} must be an int, got .*{value!r}"):
        KernelCache(cache_dir, **{argument: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("argument", ["max_entries", "max_size_mb"])
@pytest.mark.parametrize("value", [0, -1])
def test_a_bound_below_one_is_a_value_error(cache_dir: Path, argument: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"{argument} must be at least 1, got {value}"):
        KernelCache(cache_dir, **{argument: value})
