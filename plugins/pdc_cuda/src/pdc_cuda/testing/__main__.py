"""``python -m pdc_cuda.testing``: where the host build's cache is and how big it is;
``--clear-cache`` empties it (the next host-build run rebuilds what it needs)."""

from __future__ import annotations

import argparse

from ._build import cache_dir, cache_size, clear_cache


def main(argv: list[str] | None = None) -> int:
    """Print the cache's location and size, or clear it; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m pdc_cuda.testing", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--clear-cache", action="store_true", help="remove every host build and header"
    )
    args = parser.parse_args(argv)
    if args.clear_cache:
        freed = clear_cache()
        print(f"removed {freed / 2**20:.1f} MiB of host builds from {cache_dir()}")
    else:
        print(f"host-build cache: {cache_dir()} ({cache_size() / 2**20:.1f} MiB)")
        print("clear it with: python -m pdc_cuda.testing --clear-cache")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
