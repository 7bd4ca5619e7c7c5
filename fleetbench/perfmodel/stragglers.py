"""Stragglers in training runs (pure): ranks slower than their peers' median, and their hosts.

Only some records can show one. In a method=none control, or a parameter-server job, the ranks run
free and each rank's own step time (`rank_step_ms`) is its own speed. In a synchronous method
every rank waits for the slowest at each all-reduce, so their step times come out equal and a slow
rank is hidden: run the method=none control beside it (the `demo` and `explain` sweeps do) to see it.
"""
from __future__ import annotations

import statistics

from fleetbench.measure.repeats import stability

DEFAULT_THRESHOLD_PCT = 10.0


def can_show(record: dict) -> str | None:
    """Why the record's per-rank step times can show a straggler, or None when they cannot."""
    metrics = record.get("metrics") or {}
    if len(metrics.get("rank_step_ms") or []) < 2:
        return None
    if record.get("mode") == "ps":
        return "parameter-server workers run free"
    if metrics.get("control") or record.get("method") == "none":
        return "method=none control: ranks run free"
    return None


def host_of(record: dict, rank: int) -> str:
    """Rank `rank`'s host: ranks fill nodes in order, devices_per_node each (Paddle's launcher)."""
    hosts = (record.get("launch") or {}).get("hosts") or []
    node = rank // max(1, int(record.get("devices_per_node") or 1))
    return hosts[node] if node < len(hosts) else f"node{node}"


def stragglers(record: dict, threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> list[dict]:
    """Ranks whose own step time is more than threshold_pct above the median of all ranks' and,
    with 3 ranks or more, also beyond the robust spread of their peers (the outlier rule of
    measure/repeats/stability: 3 scaled MADs). Why both: free-running ranks sharing cores differ by far
    more than 10% when all are healthy (4 emulated nodes on 2 cores: 470 to 1000 ms a step), and a
    fixed threshold alone named a healthy rank there."""
    if can_show(record) is None:
        return []
    steps = [float(v) for v in record["metrics"]["rank_step_ms"]]
    middle = statistics.median(steps)
    slow = {i for i, ms in enumerate(steps) if ms > middle * (1 + threshold_pct / 100)}
    if len(steps) >= 3:
        slow &= set(stability.outliers(steps, min_rel=threshold_pct / 100))
    return [{"rank": rank, "host": host_of(record, rank), "step_ms": round(steps[rank], 2),
             "median_ms": round(middle, 2), "slower_pct": round(100 * (steps[rank] / middle - 1), 1)}
            for rank in sorted(slow)]


def line(record: dict, s: dict) -> str:
    """One straggler `s` (from stragglers()) of `record` as a line naming the run, rank, host."""
    return (f"{record.get('benchmark')} {record.get('method')} {record.get('nodes')}x"
            f"{record.get('devices_per_node')} (run {str(record.get('id'))[:8]}): rank {s['rank']} on "
            f"{s['host']} at {s['step_ms']:g} ms/step, {s['slower_pct']:g}% above the median "
            f"{s['median_ms']:g} ms ({can_show(record)})")


def report(records: list[dict], threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> list[str]:
    """One line per straggler found, naming the run, the rank, its host and by how much."""
    return [line(record, s) for record in records for s in stragglers(record, threshold_pct)]
