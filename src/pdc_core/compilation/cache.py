"""PyDotCompute's import path ``pydotcompute.compilation.cache``: compiled code kept on disk.

A thin layer for code written for PyDotCompute. :class:`KernelCache` keeps compiled
code (PTX, a cubin: any bytes) in a directory, one file per kernel name and source
hash, with an ``index.json`` listing them, so a later process finds them. It is bounded
by ``max_entries`` and ``max_size_mb`` (ints, at least 1); storing past a bound evicts
the least recently used entries first (a load counts as a use).

Nothing in the directory is trusted beyond what the cache itself derives:

- The default directory is private to the user: ``pdc/pydotcompute_cache`` under the
  user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``; ``~/Library/Caches`` on
  macOS; ``%LOCALAPPDATA%`` on Windows), created with mode 0700. It is never a shared
  temporary directory (PyDotCompute's ``<temp dir>/pydotcompute_cache`` was).
- A directory, the default or ``cache_dir``, that the user does not own or that group
  or others can write is refused with a :class:`PermissionError` naming it.
- Each entry's file name is derived from its kernel name and source hash (a digest of
  both, so two entries never share a file); a path written in ``index.json`` is never
  read. Index entries whose names do not derive their key are dropped with a
  ``RuntimeWarning``; so is an unreadable index (the cache starts empty).
- Files are written to a fresh temporary name opened with ``O_EXCL | O_NOFOLLOW`` and
  renamed into place, so a link planted at an entry's file, at ``index.json`` or at a
  temporary name is replaced, never written through; files are read with
  ``O_NOFOLLOW``, so an entry whose file is a link is dropped, never followed.
- A kernel name or source hash that is not a str, or holds a path separator or ``..``,
  is refused (:class:`TypeError`, :class:`ValueError` naming it).

A file that cannot be written raises ``OSError``.

pdc itself needs no such cache: a :class:`pdc_core.Kernel` compiles on its first launch
on each device and keeps the result, and the cuda backend keeps compiled modules per
source and options.
"""

from .._publish import publish
from .._pydotcompute.compilation.cache import (
    CacheEntry,
    KernelCache,
    get_kernel_cache,
    warmup_kernels,
)

__all__ = [
    "CacheEntry",
    "KernelCache",
    "get_kernel_cache",
    "warmup_kernels",
]

publish(__name__, globals(), __all__)
