"""What-if: predicted scaling efficiency over a grid of GPU counts and network rates, and the slowest
network that keeps a target efficiency at each count: the question a cluster buyer asks.

    fleetbench explain R.jsonl --published --predict nodes=1,2,4,8,16,32,rate_gbit=10,25,100,200 \\
        --target-efficiency 0.9

Efficiency = 1-device step / predicted step (per-device work is the same), with the range of the
prediction (perfmodel/ranges). "Keeps the target" is read at the point and said for both ends: a
network that keeps it at the slow end keeps it whatever the uncertain inputs turn out to be.
"""
from __future__ import annotations

import itertools


def _work(row: dict) -> tuple:
    batch = row.get("batch")
    if batch and (row.get("sync_every") or 1) > 1:
        batch = f"{batch}x{row['sync_every']}"
    return (row.get("model") or row["benchmark"], row.get("preset"), row.get("framework"), row.get("precision"),
            batch, row["method"])


def network_order(network) -> tuple:
    """Networks by rate (`25 Gbit/s` before `100 Gbit/s`), named ones after."""
    text = str(network or "local")
    number = text.split()[0]
    try:
        return (0, float(number), text)
    except ValueError:
        return (1, 0.0, text)


def efficiency(row: dict) -> tuple[float | None, float | None, float | None]:
    """(point, at the slow end, at the fast end) of a prediction's efficiency."""
    point = row.get("predicted_efficiency")
    if point is None:
        return None, None, None
    low, high = row.get("predicted_step_range") or (row["predicted_step_ms"],) * 2
    return point, point * row["predicted_step_ms"] / high, point * row["predicted_step_ms"] / low


def tables(rows: list[dict], target: float | None) -> list[dict]:
    """One table per work and method: {title, networks, sizes, cells {(size, network): (eff, lo, hi)},
    slowest {size: (network, kept at the slow end too)}}."""
    out = []
    rows = [r for r in rows if r.get("predicted_efficiency") is not None]
    for work, group in itertools.groupby(sorted(rows, key=lambda r: str(_work(r))), key=_work):
        group = list(group)
        networks = sorted({r["network"] for r in group}, key=network_order)
        sizes = sorted({r["world_size"] for r in group})
        cells = {(r["world_size"], r["network"]): efficiency(r) for r in group}
        slowest = {}
        for size in sizes:
            kept = [n for n in networks if (size, n) in cells and cells[(size, n)][0] >= target] if target else []
            if kept:
                slowest[size] = (kept[0], cells[(size, kept[0])][1] >= target)
        title = " ".join(str(p) for p in work[:2] if p) + "".join(
            f", {p}" for p in work[2:4] if p) + (f", batch {work[4]}" if work[4] else "") + f" — {work[5]}"
        out.append({"title": title, "networks": networks, "sizes": sizes, "cells": cells, "slowest": slowest})
    return out
