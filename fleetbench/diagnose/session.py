"""One diagnosis's measurement (runs the tests, judges nothing): every node's probe in interleaved
passes, every pair's link test in rounds of disjoint pairs, with --paddle-links Paddle's comm job
per pair and over all nodes; then every figure that breaks a rule is re-measured once, and the
better of the two counts (a healthy figure disturbed once does not flag its node; a sick one
breaks the rule twice); then, while a node's deficit is inside the noise (judge.unresolved), every
node's passes again, at most `resolve_rounds` times (`resolve`). Every pass's figures are kept
(m["passes"]): their spread is this machine's repeat noise (resolution.repeat_spread_pct).

What breaks a rule is asked of every judgement the caller will make (`references`: None for the
peers, or a baseline), so that one measurement can be judged both ways (bench/diagnose_matrix.py)
with nothing measured twice.
"""
from __future__ import annotations

import dataclasses
import functools
import time

from fleetbench.diagnose import schedule
from fleetbench.diagnose.judging import judge, metrics
from fleetbench.diagnose.judging.rules import Rule
from fleetbench.diagnose.run import ProbeFailed, each, iperf3_probe, link_probe, node_probe, timed
from fleetbench.hosts.hostlist import Host
from fleetbench.measure.repeats.stability import DISTURBED_PCT

OTHERS = metrics.OTHERS


@dataclasses.dataclass(frozen=True)
class Options:
    passes: int = 3
    seconds: float = 0.6      # per probe figure
    timeout: float = 60.0
    concurrent: bool = False  # real hosts: a pass's node probes, a round's pairs at once
    paddle_links: bool = False
    iperf3: bool = False
    link_seconds: float = 1.0
    disturbed_pct: float = DISTURBED_PCT  # a figure measured while others used more is not judged
    resolve_rounds: int = 2  # rounds of every node's passes again while a deficit is inside the noise


def better(metric: str, old: float | None, new: float | None) -> float | None:
    """The better of two figures of `metric` (higher, or lower for temperatures and error counts)."""
    if old is None or new is None:
        return new if old is None else old
    spec = metrics.METRICS.get(metric)
    return max(old, new) if spec is None or spec.higher_is_better else min(old, new)


def quietest(*others: dict | None) -> dict:
    """Per metric, the least any of several measurements saw others use of the machine (%): a
    figure is judged when at least one of its measurements was quiet (a sick node measures low
    when quiet too; every figure of it is at most the best, which is the one judged)."""
    out: dict = {}
    for seen in others:
        for metric, pct in (seen or {}).items():
            if pct is not None:
                out[metric] = pct if out.get(metric) is None else min(out[metric], pct)
    return out


def best_of(runs: list[dict]) -> dict:
    """One figure per metric from several passes: the best. A sick node cannot reach a healthy
    figure in any pass, while a healthy one disturbed by a neighbour still reaches it in some:
    the median of passes flagged a healthy node in 1 of 5 clean runs beside other work here (a
    neighbour's test covered 2 of its 3 passes: 45.7 vs 62.3 GFLOP/s). With it, the quietest
    pass's share of the machine taken by others (`quietest`)."""
    best = {m: functools.reduce(lambda a, b, m=m: better(m, a, b), (r.get(m) for r in runs))
            for m in runs[0] if m != OTHERS}
    return {**best, OTHERS: quietest(*(r.get(OTHERS) for r in runs))} if OTHERS in runs[0] else best


def probe_nodes(hosts: list[Host], opts: Options, phases: dict, passes: dict | None = None) -> tuple[dict, dict]:
    """Every node's best pass, and the nodes that failed; each pass's figures added to `passes`."""
    runs: dict[int, list[dict]] = {h.index: [] for h in hosts}
    problems: dict[int, tuple[str, str]] = {}
    by_index = {h.index: h for h in hosts}
    order = schedule.node_passes(list(by_index), opts.passes)
    for start in range(0, len(order), len(hosts)):  # one pass: every node, one by one or at once
        todo = [i for i in order[start:start + len(hosts)] if i not in problems]  # a failure is final
        calls = [functools.partial(timed, phases, "nodes_s", node_probe, by_index[i], opts.seconds, opts.timeout)
                 for i in todo]
        for index, got in zip(todo, each(calls, opts.concurrent)):
            if isinstance(got, ProbeFailed):
                problems[index] = (got.category, str(got))
            else:
                runs[index].append(got)
                if passes is not None:
                    passes.setdefault(index, []).append(got)
    return {i: best_of(rs) for i, rs in runs.items() if rs and i not in problems}, problems


def pair_test(a: Host, b: Host, opts: Options, phases: dict) -> dict:
    """The raw TCP rate from a to b (and each end's CPU wait), with --iperf3 iperf3's, with
    --paddle-links Paddle's busbw.
    A failed test leaves the pair's `error` (a verdict, not a crash)."""
    try:
        found = timed(phases, "links_s", link_probe, a, b, opts.link_seconds, opts.timeout)
    except ProbeFailed as e:
        found = {"link_gbps": None, "error": str(e)}
    if opts.iperf3:
        try:
            found.update(timed(phases, "iperf3_s", iperf3_probe, a, b, opts.link_seconds, opts.timeout))
        except ProbeFailed as e:
            found["error"] = "; ".join(x for x in (found.get("error"), f"iperf3: {e}") if x)
    if not opts.paddle_links:
        return found
    from fleetbench.diagnose import paddle_links

    paddle = timed(phases, "paddle_links_s", paddle_links.collective_test, [a, b], opts.timeout)
    failed = paddle.pop("error", None)
    errors = [e for e in (found.get("error"), failed and f"Paddle comm job: {failed}") if e]
    return {**found, **paddle, **({"error": "; ".join(errors)} if errors else {})}


def probe_links(hosts: list[Host], skip: set, opts: Options, phases: dict) -> dict:
    """Per pair, in rounds of disjoint pairs (a round at once with --concurrent)."""
    by_index = {h.index: h for h in hosts}
    links = {}
    for round_ in schedule.pair_rounds([h.index for h in hosts if h.index not in skip]):
        calls = [functools.partial(pair_test, by_index[a], by_index[b], opts, phases) for a, b in round_]
        links.update(zip(round_, each(calls, opts.concurrent)))
    return links


def probe_cluster(hosts: list[Host], skip: set, opts: Options, phases: dict) -> dict | None:
    """With --paddle-links and 3 nodes or more: one all_reduce over every reachable node (with 2,
    their pair test is that job already)."""
    reachable = [h for h in hosts if h.index not in skip]
    if not opts.paddle_links or len(reachable) < 3:
        return None
    from fleetbench.diagnose import paddle_links

    found = timed(phases, "cluster_s", paddle_links.collective_test, reachable, opts.timeout)
    figures = {f"cluster_{k}": v for k, v in found.items() if k != "error"}
    return {"nodes": [h.index for h in reachable], **figures, **({"error": found["error"]} if "error" in found else {})}


def breaking(m: dict, rules: list[Rule], references: list[dict | None]) -> tuple[set, set]:
    """The nodes and links with a figure that breaks a rule under any of the judgements."""
    nodes, links, limit = set(), set(), m.get("disturbed_pct", DISTURBED_PCT)
    for baseline in references:
        for v in judge.judge_nodes(m["nodes"], rules, baseline, None, m["remeasured"], limit):
            if any(x["value"] is not None for x in v["violations"] + v.get("disturbed", [])):
                nodes.add(v["index"])
        slow = judge.slow_links({p: f for p, f in m["links"].items() if not f.get("error")}, rules, baseline,
                                m["remeasured"], limit)
        links |= set(slow)
    return nodes, links


def _merged(old: dict, new: dict) -> dict:
    """A re-measured test's figures: each metric's better; the CPU waits go with the link rate."""
    out = {k: better(k, old.get(k), new.get(k)) if k in metrics.METRICS else old.get(k) for k in old}
    if "link_gbps" in old and out["link_gbps"] != old["link_gbps"]:
        out.update({k: v for k, v in new.items() if k.endswith("_cpu_wait")})
    if OTHERS in old or OTHERS in new:
        out[OTHERS] = quietest(old.get(OTHERS), new.get(OTHERS))
    return out


def remeasure(m: dict, hosts: list[Host], opts: Options, rules: list[Rule], references: list) -> None:
    """Measure once more what breaks a rule: a node's probe in its --passes passes again (the
    nodes interleaved, as the first time), a link's test again; keep the better figures and note
    both in m["remeasured"]. Until nothing new breaks: a re-measured peer moves the others'
    reference, and a figure that breaks a rule only then is re-measured too (each at most once)."""
    by_index, done = {h.index: h for h in hosts}, set()
    while True:
        nodes, pairs = breaking(m, rules, references)
        nodes, pairs = sorted(nodes - done), sorted(pairs - done)
        if not nodes and not pairs:
            return
        done.update(nodes, pairs)
        spent: dict = {}
        # a node failing now keeps its first figures
        again = probe_nodes([by_index[i] for i in nodes], opts, spent)[0] if nodes else {}
        for i, new in again.items():
            m["remeasured"][f"node {i}"] = {k: [m["nodes"][i][k], new.get(k)] for k in m["nodes"][i]
                                            if k in metrics.METRICS}
            m["nodes"][i] = _merged(m["nodes"][i], new)
        m["phases"]["remeasure_s"] = round(m["phases"].get("remeasure_s", 0.0) + spent.get("nodes_s", 0.0), 2)
        for a, b in pairs:
            _again_link(m, by_index[a], by_index[b], opts)


def _again_link(m: dict, a: Host, b: Host, opts: Options) -> None:
    new = timed(m["phases"], "remeasure_s", pair_test, a, b, opts, {})
    if new.get("error"):
        return
    old = m["links"][(a.index, b.index)]
    m["remeasured"][f"link {a.index}-{b.index}"] = {k: [old[k], new.get(k)] for k in old if k in metrics.METRICS}
    m["links"][(a.index, b.index)] = _merged(old, new)


def resolve(m: dict, hosts: list[Host], opts: Options, rules: list[Rule], references: list) -> None:
    """While a node is unresolved under any judgement (a deficit inside the noise), every node's
    passes again, each figure's best kept: the peers' too, since their spread is the noise that hid
    it. At most opts.resolve_rounds rounds; how many ran is m["resolve_rounds"]."""
    limit, m["resolve_rounds"] = m.get("disturbed_pct", DISTURBED_PCT), 0
    judged = [h for h in hosts if h.index in m["nodes"]]
    while m["resolve_rounds"] < opts.resolve_rounds and any(
            v["verdict"] == "unresolved" for baseline in references
            for v in judge.judge_nodes(m["nodes"], rules, baseline, None, m["remeasured"], limit)):
        spent: dict = {}
        for i, new in probe_nodes(judged, opts, spent, m.setdefault("passes", {}))[0].items():
            m["nodes"][i] = _merged(m["nodes"][i], new)
        m["phases"]["resolve_s"] = round(m["phases"].get("resolve_s", 0.0) + spent.get("nodes_s", 0.0), 2)
        m["resolve_rounds"] += 1


def measure(hosts: list[Host], opts: Options, rules: list[Rule], references: list) -> dict:
    """{nodes, passes, problems, links, cluster, remeasured, resolve_rounds, phases, elapsed_s} of one
    diagnosis."""
    start, phases, passes = time.monotonic(), {}, {}
    nodes, problems = probe_nodes(hosts, opts, phases, passes)
    links = probe_links(hosts, set(problems), opts, phases) if len(hosts) > 1 else {}
    cluster = probe_cluster(hosts, set(problems), opts, phases)
    m = {"nodes": nodes, "passes": passes, "problems": problems, "links": links, "cluster": cluster,
         "remeasured": {}, "phases": phases, "disturbed_pct": opts.disturbed_pct}
    remeasure(m, hosts, opts, rules, references)
    resolve(m, hosts, opts, rules, references)
    m["elapsed_s"] = round(time.monotonic() - start, 1)
    return m
