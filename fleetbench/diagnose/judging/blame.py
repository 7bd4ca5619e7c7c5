"""Blame that follows cause (pure): which node, if any, a slow or failed link is charged to.

1. A slow link one of whose ends is flagged `compute`, or was CPU-saturated during the link test
   (its probe process waited for a CPU SATURATED of the time or more, and that much more than the
   other end: /proc/self/schedstat's run delay, which a CPU quota's throttling adds to), is
   *explained* by that end. The healthy peer
   is not charged, and the explaining node is not charged `network` either: its links are slow
   because it is short of CPU, and its row says which links it explains.
2. Otherwise the link is blamed on an end whose other links are all slow too (a node with two
   links or more): that node is the common cause.
3. A slow link both of whose ends waited for a CPU SATURATED of the test is `cpu-bound`: its figure
   was set by the CPUs (a busy machine), not the link; no node is charged and it is no finding
   (exit 0), its row says so. (At 1 Gbit/s the ends of a shaped link waited 1-7% of the test;
   healthy links under a load of 10 on 2 cores, 40-75%.)
4. Otherwise no end is set apart: two nodes (one link), or a slow link between two nodes whose
   other links are fine (a cable, a port). The link is slow, the exit code says so, no node is
   named. Likewise when every link of 3 or more nodes is slow: the network as a whole (or the
   probe), not a node.
"""
from __future__ import annotations

SATURATED = 0.25
ENDS = ("a", "b")  # a link's ends: a sends, b receives (a < b)


def _saturated(figures: dict, pair: tuple[int, int]) -> list[int]:
    """The end that waited for a CPU SATURATED of the test, and that much more than the other end:
    when the whole machine is busy both ends wait alike, and that sets neither apart."""
    waits = [figures.get(f"{end}_cpu_wait") or 0.0 for end in ENDS]
    return [node for node, mine, other in zip(pair, waits, waits[::-1]) if mine >= SATURATED and mine - other >= SATURATED]


def _all_slow(node: int, slow: dict, pairs: set) -> bool:
    own = [p for p in pairs if node in p]
    return len(own) >= 2 and all(p in slow for p in own)


def _cpu_bound(figures: dict) -> bool:
    """Both ends waited for a CPU SATURATED of the test: the machine's CPUs set the figure, not the
    link (a link slowed by the network leaves its ends asleep on the socket, not waiting to run)."""
    return not figures.get("error") and all((figures.get(f"{end}_cpu_wait") or 0.0) >= SATURATED for end in ENDS)


def _cause(pair: tuple[int, int], figures: dict, slow: dict, compute: set, pairs: set) -> dict:
    """How one slow link is accounted for: explained_by, blamed_on, or a note."""
    if _cpu_bound(figures) and not compute & set(pair):
        return {"note": f"cpu-bound: both ends waited for a CPU ({figures['a_cpu_wait']:.0%}, "
                        f"{figures['b_cpu_wait']:.0%} of the test): the CPUs, not the link, set this figure"}
    explained = sorted({n for n in pair if n in compute} | set(_saturated(figures, pair)))
    if explained:
        return {"explained_by": explained}
    if len(pairs) >= 3 and set(slow) == pairs:
        return {"blamed_on": [], "note": "every link slow: the network as a whole (or the probe), no node set apart"}
    culprits = [n for n in pair if _all_slow(n, slow, pairs)]
    if culprits:
        return {"blamed_on": culprits}
    why = "one link, two ends" if len(pairs) == 1 else "both ends have healthy links"
    return {"blamed_on": [], "note": f"neither end set apart ({why})"}


def blame(links: dict[tuple[int, int], dict], slow: dict[tuple[int, int], list[dict]],
          nodes: list[dict]) -> tuple[list[dict], dict[int, list[dict]], dict[int, list[str]]]:
    """Link verdicts, the link violations charged to nodes, and the slow links each node explains.
    `slow`: pair -> violations (judge.slow_links); `nodes`: the node verdicts (their categories)."""
    compute = {n["index"] for n in nodes if "compute" in n["categories"]}
    pairs = set(links)
    verdicts, charged, explains = [], {}, {}
    for pair in sorted(links):
        found = slow.get(pair, [])
        cause = _cause(pair, links[pair], slow, compute, pairs) if found else {}
        state = "failed" if links[pair].get("error") else "healthy" if not found else \
            "cpu-bound" if cause.get("note", "").startswith("cpu-bound") else "slow"
        row = {"a": pair[0], "b": pair[1], "verdict": state, "categories": sorted({v["category"] for v in found}),
               "violations": found, **links[pair], **cause}
        if found:
            for node in cause.get("explained_by", []):
                explains.setdefault(node, []).append(f"{pair[0]}-{pair[1]}")
            for node in cause.get("blamed_on", []):
                charged.setdefault(node, []).extend(
                    {**v, "metric": f"{v['metric']} ({pair[0]}-{pair[1]})"} for v in found)
        verdicts.append(row)
    return verdicts, charged, explains


def merge(nodes: list[dict], charged: dict[int, list[dict]], explains: dict[int, list[str]]) -> list[dict]:
    """Node verdicts with the link violations charged to them, and the links they explain."""
    out = []
    for node in nodes:
        extra = charged.get(node["index"], [])
        if extra and node["verdict"] != "unreachable":
            violations = node["violations"] + extra
            node = {**node, "verdict": "defective", "violations": violations,
                    "categories": sorted({v["category"] for v in violations})}
        if node["index"] in explains:
            node = {**node, "explains": explains[node["index"]]}
        out.append(node)
    return out
