"""Which tests run when (pure): rounds of disjoint node pairs and interleaved node passes."""
from __future__ import annotations


def pair_rounds(nodes: list[int]) -> list[list[tuple[int, int]]]:
    """Every pair of `nodes` exactly once, in rounds of disjoint pairs (the circle method of a
    round-robin tournament): N nodes take N-1 rounds when N is even, N when odd (one node rests in
    each round). Within a round no node is in two pairs, so on real hosts a round's pairs can run
    at once without sharing a NIC."""
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])
    rounds = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        pairs = [(ring[i], ring[-1 - i]) for i in range(half)]
        rounds.append([tuple(sorted(p)) for p in pairs if None not in p])
        ring = [ring[0], ring[-1], *ring[1:-1]]  # keep the first fixed, rotate the rest
    return rounds


def node_passes(nodes: list[int], passes: int) -> list[int]:
    """The order of per-node probes when nodes share one machine's cores: every node once per
    pass, passes one after another, so a transient neighbour disturbs one pass of one node and a
    node's median over passes is not moved by it."""
    return [n for _ in range(passes) for n in nodes]
