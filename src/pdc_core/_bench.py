"""``pdc bench`` (being written)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true")


def run(args: argparse.Namespace) -> int:
    return 0
