"""Body of PyDotCompute's :mod:`pdc_core.compilation.cache`; see its docstring."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import pathlib
import secrets
import stat
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdc_core.lowlevel import check_count

from .compiler import get_compiler

__all__ = ["CacheEntry", "KernelCache", "get_kernel_cache", "warmup_kernels"]

# Where the platform lacks a flag (O_NOFOLLOW on Windows), 0: the private directory
# is then what keeps strangers' links out.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a planted FIFO must not block
_BINARY = getattr(os, "O_BINARY", 0)


@dataclass
class CacheEntry:
    """One kept kernel: its name, source hash and signature, the file of its code,
    free-form ``metadata``, when it was stored and last loaded (``time.time()``) and how
    many loads found it."""

    kernel_name: str
    source_hash: str
    signature: str | None
    # Spelled with its module: the reference reads the annotation where the class is
    # published (pdc_core.compilation.cache), which imports no Path.
    ptx_path: pathlib.Path | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_timestamp: float = 0.0
    last_accessed: float = 0.0
    hit_count: int = 0


def _user_cache_dir() -> Path:
    """The user's own cache directory on this platform (not created here)."""
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return Path(local) if local else Path.home() / "AppData" / "Local"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG rule: a relative value is ignored.
    return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"


def _private_directory(directory: Path) -> Path:
    """``directory``, created 0700 when missing, after checking it is the user's own
    and that nobody else can write it (a :class:`PermissionError` naming it if not)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700)
    info = os.stat(directory)  # a link to a directory is judged by that directory
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"kernel cache directory {str(directory)!r} is not a directory")
    getuid = getattr(os, "getuid", None)
    if getuid is None:  # Windows: no modes to read; the profile's folders are private
        return directory
    uid = getuid()
    if info.st_uid != uid:
        raise PermissionError(
            f"kernel cache directory {str(directory)!r} belongs to uid {info.st_uid}, "
            f"not to this user (uid {uid}): refused; pass a cache_dir of your own"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(
            f"kernel cache directory {str(directory)!r} can be written by others "
            f"(mode {stat.S_IMODE(info.st_mode):#o}): refused; make it private "
            "(chmod go-w) or pass another cache_dir"
        )
    return directory


def _check_name(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    separators = {"/", "\\", os.sep, os.altsep or "/", "\0"}
    if ".." in value or any(character in value for character in separators):
        raise ValueError(
            f"{name} {value!r} holds a path separator or '..': a cache entry's name "
            "never leaves the cache directory"
        )
    return value


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path``, never through a link (``OSError`` if it is one) and only
    from a regular file."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _BINARY)
    with open(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(f"{str(path)!r} is not a regular file")
        return file.read()


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path``: written to a fresh name that no link can stand at
    (``O_CREAT | O_EXCL | O_NOFOLLOW``), then renamed over ``path`` (a link there is
    replaced, not followed). A reader sees the old file or the new one, whole."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _BINARY
    fd = os.open(partial, flags, 0o600)
    try:
        with open(fd, "wb") as file:
            file.write(data)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class KernelCache:
    """Compiled code on disk, least recently used out first (see the module documentation)."""

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        max_entries: int = 128,
        max_size_mb: int = 256,
    ) -> None:
        self._max_entries = check_count(max_entries, "max_entries")
        self._max_size_bytes = check_count(max_size_mb, "max_size_mb") * 1024 * 1024
        if cache_dir is None:
            cache_dir = _user_cache_dir() / "pdc" / "pydotcompute_cache"
        self._cache_dir = _private_directory(Path(cache_dir))
        self._index_file = self._cache_dir / "index.json"
        # Least recently used first: a use moves an entry to the end.
        self._entries: dict[str, CacheEntry] = self._read_index()

    def _read_index(self) -> dict[str, CacheEntry]:
        try:
            data = json.loads(_read_regular(self._index_file).decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:  # a link, a directory, not JSON
            self._warn(f"kernel cache index {self._index_file} is unreadable ({error})")
            return {}
        if not isinstance(data, dict):
            self._warn(f"kernel cache index {self._index_file} is unreadable (not an object)")
            return {}
        entries: dict[str, CacheEntry] = {}
        dropped: list[str] = []
        for key, fields in data.items():
            entry = self._entry_from_index(key, fields)
            if entry is None:
                dropped.append(key)
            else:
                entries[key] = entry
        if dropped:
            self._warn(
                f"kernel cache index {self._index_file}: dropped {len(dropped)} entries "
                f"that do not match their names or fields ({', '.join(map(repr, dropped[:3]))}"
                f"{', ...' if len(dropped) > 3 else ''})",
                empty=False,
            )
        return entries

    def _entry_from_index(self, key: str, fields: object) -> CacheEntry | None:
        """The index's entry at ``key`` if every field is what :meth:`store` writes and
        its names derive ``key``; its file is the derived one whatever the index says."""
        if not isinstance(fields, dict):
            return None
        try:
            entry = CacheEntry(**fields)
            derived = self._get_cache_key(entry.kernel_name, entry.source_hash)
        except (TypeError, ValueError):
            return None
        well_formed = (
            derived == key
            and (entry.signature is None or isinstance(entry.signature, str))
            and isinstance(entry.metadata, dict)
            and _is_number(entry.created_timestamp)
            and _is_number(entry.last_accessed)
            and type(entry.hit_count) is int
        )
        if not well_formed:
            return None
        entry.ptx_path = self._get_ptx_path(key)
        return entry

    def _warn(self, message: str, *, empty: bool = True) -> None:
        suffix = "; starting with an empty cache" if empty else ""
        warnings.warn(message + suffix, RuntimeWarning, stacklevel=4)

    def _write_index(self) -> None:
        data = {key: asdict(entry) for key, entry in self._entries.items()}
        for fields in data.values():
            # Written for PyDotCompute's readers; never read back (the path is derived).
            fields["ptx_path"] = str(fields["ptx_path"]) if fields["ptx_path"] else None
        _write_atomically(self._index_file, json.dumps(data, indent=1).encode("utf-8"))

    def _get_cache_key(self, kernel_name: str, source_hash: str) -> str:
        """The entry's key and file stem: a digest of both names, so no two entries
        share one (``"a_b", "c"`` and ``"a", "b_c"`` would as ``name_hash``)."""
        name = _check_name(kernel_name, "kernel_name")
        digest = _check_name(source_hash, "source_hash")
        return hashlib.sha256(f"{name}\0{digest}".encode()).hexdigest()[:40]

    def _get_ptx_path(self, cache_key: str) -> Path:
        return self._cache_dir / f"{cache_key}.ptx"

    def _size(self) -> int:
        total = 0
        for key in self._entries:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(self._get_ptx_path(key)).st_size
        return total

    def _drop(self, key: str) -> CacheEntry | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._get_ptx_path(key))  # a link is removed, not followed
        return entry

    def store(
        self,
        kernel_name: str,
        source_hash: str,
        ptx: bytes | str,
        *,
        signature: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        """Keep ``ptx`` (str is stored UTF-8 encoded) as ``kernel_name`` at
        ``source_hash``, evicting the least recently used entries until it fits; True."""
        key = self._get_cache_key(kernel_name, source_hash)
        if isinstance(ptx, str):
            code = ptx.encode()
        elif isinstance(ptx, (bytes, bytearray, memoryview)):
            code = bytes(ptx)
        else:  # bytes(5) would be five zero bytes
            raise TypeError(f"ptx must be bytes or str, got {type(ptx).__name__}")
        self._drop(key)
        while self._entries and (
            len(self._entries) >= self._max_entries
            or self._size() + len(code) > self._max_size_bytes
        ):
            self._drop(next(iter(self._entries)))
        path = self._get_ptx_path(key)
        _write_atomically(path, code)
        now = time.time()
        self._entries[key] = CacheEntry(
            kernel_name, source_hash, signature, path, dict(metadata or {}), now, now
        )
        self._write_index()
        return True

    def load(self, kernel_name: str, source_hash: str) -> bytes | None:
        """The code kept for ``kernel_name`` at ``source_hash``, or ``None`` (an entry
        whose file is gone, or is a link or not a regular file, is forgotten). A load
        counts as a use."""
        key = self._get_cache_key(kernel_name, source_hash)
        entry = self._entries.get(key)
        if entry is None:
            return None
        path = self._get_ptx_path(key)
        try:
            code = _read_regular(path)
        except FileNotFoundError:
            self._drop(key)
            self._write_index()
            return None
        except OSError as error:  # ELOOP: a link; or not a regular file
            if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
                warnings.warn(
                    f"kernel cache entry {path} is not a regular file ({error}): dropped",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self._drop(key)
                self._write_index()
                return None
            raise
        entry.last_accessed = time.time()
        entry.hit_count += 1
        self._entries[key] = self._entries.pop(key)  # now the most recently used
        self._write_index()
        return code

    def contains(self, kernel_name: str, source_hash: str) -> bool:
        """Whether ``kernel_name`` at ``source_hash`` is kept."""
        return self._get_cache_key(kernel_name, source_hash) in self._entries

    def remove(self, kernel_name: str, source_hash: str) -> bool:
        """Forget ``kernel_name`` at ``source_hash`` and delete its file; whether it was kept."""
        removed = self._drop(self._get_cache_key(kernel_name, source_hash)) is not None
        if removed:
            self._write_index()
        return removed

    def clear(self) -> int:
        """Forget every entry and delete its file; how many there were."""
        count = len(self._entries)
        for key in list(self._entries):
            self._drop(key)
        self._write_index()
        return count

    def get_stats(self) -> dict[str, Any]:
        """Entries, bounds, bytes on disk, loads that found an entry, and the directory."""
        return {
            "entries": len(self._entries),
            "max_entries": self._max_entries,
            "total_size_bytes": self._size(),
            "max_size_bytes": self._max_size_bytes,
            "total_hits": sum(entry.hit_count for entry in self._entries.values()),
            "cache_dir": str(self._cache_dir),
        }

    def __repr__(self) -> str:
        return (
            f"KernelCache(entries={len(self._entries)}/{self._max_entries}, "
            f"size={self._size() // 1024}KB)"
        )


#: The cache :func:`get_kernel_cache` returns (made at first use).
_global_cache: KernelCache | None = None


def get_kernel_cache() -> KernelCache:
    """The process's :class:`KernelCache` (in the default directory)."""
    global _global_cache
    if _global_cache is None:
        _global_cache = KernelCache()
    return _global_cache


def warmup_kernels(kernels: list[Callable[..., Any]]) -> None:
    """Compile each of ``kernels`` with the process's compiler (``get_compiler()``)
    now, so their first use does not wait; a kernel that does not compile raises
    :class:`~pdc_core.exceptions.KernelCompilationError`."""
    compiler = get_compiler()
    for function in kernels:
        compiler.compile(function)
