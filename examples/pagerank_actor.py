"""PageRank as an actor that owns a graph and answers rank queries.

    python examples/pagerank_actor.py [--nodes 2000] [--async-backend trio]

The actor holds the (column-stochastic) link matrix; ``ask(("rank", iters))`` runs
power iteration on the backend's arrays (NumPy on the CPU backend) and replies with
the ranks; ``ask(("add_edges", edges))`` updates the graph between queries. One
message at a time, so the graph needs no lock.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np

from pdc_core import Actor, open_nursery


class PageRank(Actor[tuple[str, Any], Any]):
    def __init__(self, nodes: int, damping: float = 0.85) -> None:
        self.nodes = nodes
        self.damping = damping
        self.links = np.zeros((nodes, nodes), dtype=np.float64)

    async def handle(self, message: tuple[str, Any]) -> Any:
        command, arg = message
        if command == "add_edges":
            src, dst = np.asarray(arg).T
            self.links[dst, src] = 1.0
            return int(self.links.sum())
        if command == "rank":
            return self.rank(int(arg))
        raise ValueError(f"unknown command {command!r}: expected 'add_edges' or 'rank'")

    def rank(self, iterations: int) -> np.ndarray:
        out_degree = self.links.sum(axis=0)
        dangling = out_degree == 0
        matrix = self.links / np.where(dangling, 1.0, out_degree)
        ranks = np.full(self.nodes, 1.0 / self.nodes)
        for _ in range(iterations):
            leaked = ranks[dangling].sum() / self.nodes
            ranks = (1 - self.damping) / self.nodes + self.damping * (matrix @ ranks + leaked)
        return ranks


async def run(nodes: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, nodes, size=(nodes * 8, 2))
    hub_edges = np.stack([np.arange(nodes), np.zeros(nodes, dtype=np.int64)], axis=1)
    async with open_nursery() as nursery:
        graph = await nursery.start_actor(PageRank, nodes, name="pagerank")
        await graph.ask(("add_edges", edges))
        await graph.ask(("add_edges", hub_edges))  # everyone links to node 0
        ranks: np.ndarray = await graph.ask(("rank", 50))
    assert abs(ranks.sum() - 1.0) < 1e-9
    assert int(np.argmax(ranks)) == 0
    return ranks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--async-backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    ranks = anyio.run(run, args.nodes, backend=args.async_backend)
    top = np.argsort(ranks)[::-1][:5]
    print("top nodes:", ", ".join(f"{i} ({ranks[i]:.4f})" for i in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
