"""PyDotCompute's import path ``pydotcompute.compilation.cache``: compiled code kept on disk.

A thin layer for code written for PyDotCompute. :class:`KernelCache` keeps compiled
code (PTX, a cubin: any bytes) in a directory, one file per kernel name and source
hash, with an ``index.json`` listing them, so a later process finds them. It is bounded
by ``max_entries`` and ``max_size_mb``; storing past a bound evicts the least recently
used entries first (a load counts as a use). The default directory is the one
PyDotCompute used, ``<temp dir>/pydotcompute_cache``, so what PyDotCompute stored there
is found. An unreadable index is reported with a ``RuntimeWarning`` and the cache
starts empty; a file that cannot be written raises ``OSError``.

pdc itself needs no such cache: a :class:`pdc_core.Kernel` compiles on its first launch
on each device and keeps the result, and the cuda backend keeps compiled modules per
source and options.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .compiler import get_compiler

__all__ = ["CacheEntry", "KernelCache", "get_kernel_cache", "warmup_kernels"]


@dataclass
class CacheEntry:
    """One kept kernel: its name, source hash and signature, the file of its code,
    free-form ``metadata``, when it was stored and last loaded (``time.time()``) and how
    many loads found it."""

    kernel_name: str
    source_hash: str
    signature: str | None
    ptx_path: Path | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_timestamp: float = 0.0
    last_accessed: float = 0.0
    hit_count: int = 0


class KernelCache:
    """Compiled code on disk, least recently used out first (see the module documentation)."""

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        max_entries: int = 128,
        max_size_mb: int = 256,
    ) -> None:
        if cache_dir is None:
            cache_dir = Path(tempfile.gettempdir()) / "pydotcompute_cache"
        self._cache_dir = Path(cache_dir)
        self._cache_dir.mkdir(parents=True, exist_ok=True)
        self._max_entries = max_entries
        self._max_size_bytes = max_size_mb * 1024 * 1024
        self._index_file = self._cache_dir / "index.json"
        # Least recently used first: a use moves an entry to the end.
        self._entries: dict[str, CacheEntry] = self._read_index()

    def _read_index(self) -> dict[str, CacheEntry]:
        if not self._index_file.exists():
            return {}
        try:
            data = json.loads(self._index_file.read_text(encoding="utf-8"))
            entries = {key: CacheEntry(**fields) for key, fields in data.items()}
        except (OSError, ValueError, TypeError, AttributeError) as error:
            warnings.warn(
                f"kernel cache index {self._index_file} is unreadable ({error}); "
                "starting with an empty cache",
                RuntimeWarning,
                stacklevel=3,
            )
            return {}
        for entry in entries.values():
            entry.ptx_path = Path(entry.ptx_path) if entry.ptx_path else None
        return entries

    def _write_index(self) -> None:
        data = {key: asdict(entry) for key, entry in self._entries.items()}
        for fields in data.values():
            fields["ptx_path"] = str(fields["ptx_path"]) if fields["ptx_path"] else None
        # Written whole, then renamed: a reader never sees half an index.
        partial = self._index_file.with_suffix(".json.tmp")
        partial.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(partial, self._index_file)

    def _get_cache_key(self, kernel_name: str, source_hash: str) -> str:
        return f"{kernel_name}_{source_hash}"

    def _get_ptx_path(self, cache_key: str) -> Path:
        return self._cache_dir / f"{cache_key}.ptx"

    def _size(self) -> int:
        return sum(
            entry.ptx_path.stat().st_size
            for entry in self._entries.values()
            if entry.ptx_path is not None and entry.ptx_path.exists()
        )

    def _drop(self, key: str) -> CacheEntry | None:
        entry = self._entries.pop(key, None)
        if entry is not None and entry.ptx_path is not None:
            with contextlib.suppress(FileNotFoundError):
                entry.ptx_path.unlink()
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
        code = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
        key = self._get_cache_key(kernel_name, source_hash)
        self._drop(key)
        while self._entries and (
            len(self._entries) >= self._max_entries
            or self._size() + len(code) > self._max_size_bytes
        ):
            self._drop(next(iter(self._entries)))
        path = self._get_ptx_path(key)
        path.write_bytes(code)
        now = time.time()
        self._entries[key] = CacheEntry(
            kernel_name, source_hash, signature, path, dict(metadata or {}), now, now
        )
        self._write_index()
        return True

    def load(self, kernel_name: str, source_hash: str) -> bytes | None:
        """The code kept for ``kernel_name`` at ``source_hash``, or ``None`` (an entry
        whose file is gone is forgotten). A load counts as a use."""
        key = self._get_cache_key(kernel_name, source_hash)
        entry = self._entries.get(key)
        if entry is None:
            return None
        try:
            if entry.ptx_path is None:
                raise FileNotFoundError(key)
            code = entry.ptx_path.read_bytes()
        except FileNotFoundError:
            self._drop(key)
            self._write_index()
            return None
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
