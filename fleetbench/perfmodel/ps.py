"""Parameter-server cells (Paddle's fleet PS: `async` and `geo`): their measured parts and their
step predicted from the same work's 1-node run of as many workers and the link
(docs/guide/explain.md, "Parameter servers").

A worker's step is its compute plus what the link adds. Paddle's PS communicator pushes and
pulls on its own threads beside the trainer (`async`: every step's gradients, merged while a send
is under way; `geo`: the parameters' change once every `k_steps`), so the transfer hides behind
compute until it is longer than a step:

    step = step(1-node run, same workers) + max(0, wire - step(1-node run))
    wire = 2 x bytes a step x (nodes - 1) / nodes / (k for geo, 1 for async) / B

(the shards on the worker's own node's server stay off the wire), with B the worker's link
(links.delivered: its rate and transport) and bytes a step those the
record gives (metrics.comm_bytes_per_step or grad_bytes); a record without them is predicted on
compute alone, and the note says the wire was not priced. The 1-node run has the same processes
on the same cores as nodes emulated on that host, so core sharing needs no model here; on real
nodes each has its own cores and the 1-node run is an upper bound of the step.
A synchronous PS of published tables (BytePS, one server a node) is a collective's bus traffic
(published.SYNC_PS) and goes through the all-reduce model instead.
"""
from __future__ import annotations

import statistics

from fleetbench.perfmodel import links
from fleetbench.measure.repeats import experiment

# a PS worker's measured parts (metrics.step_breakdown, train/ps/marks.py) that explain names
PARTS_SHOWN = ("compute", "pull", "push", "reader", "client_cpu")


def measured_parts(metrics: dict) -> dict | None:
    """A PS run's step breakdown as ms a step of its median worker (by step), and its servers'
    mean busy share (cores' worth); None for a record without one (written before the step breakdown)."""
    block = metrics.get("step_breakdown") or {}
    rows = block.get("ranks") or []
    if block.get("family") != "ps" or not rows:
        return None
    median = sorted(rows, key=lambda r: r["step"])[(len(rows) - 1) // 2]
    busy = [s["busy"] for s in block.get("servers") or [] if s.get("busy") is not None]
    return {**{p: median.get(p) for p in PARTS_SHOWN}, "servers_busy": statistics.fmean(busy) if busy else None}


def parts_note(runs: list[dict]) -> str:
    """One line: a PS cell's measured parts (mean over its runs), beside the prediction's step."""
    def mean(key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.fmean(values) if values else None
    shown = [f"{p} {mean(p):.1f}" for p in PARTS_SHOWN if mean(p) is not None]
    busy = mean("servers_busy")
    return ("measured a step (median worker): " + ", ".join(shown) + " ms"
            + (f"; servers busy {busy:.2f} cores" if busy is not None else ""))


CONFIG_NOISE = ("runtime",)  # who ran it (threads, servers), not the work


def _work(record: dict) -> tuple:
    config = {k: v for k, v in (record.get("config") or {}).items() if k not in CONFIG_NOISE}
    return (record["benchmark"], record.get("preset"), record["method"], repr(sorted(config.items(), key=str)))


def _cells(records: list[dict]) -> dict:
    """(work, network, nodes, world size) -> the step times of its runs."""
    out: dict = {}
    for r in records:
        if r.get("mode") != "ps" or r.get("error") is not None or not (r.get("metrics") or {}).get("step_time_ms"):
            continue
        key = (_work(r), experiment.network_name(r.get("network")), r["nodes"], r["world_size"])
        cell = out.setdefault(key, {"runs": [], "throughput": [], "record": r})
        cell["runs"].append(r["metrics"]["step_time_ms"])
        cell["throughput"].append(r["metrics"]["throughput"])
        parts = measured_parts(r["metrics"])
        if parts:  # the run's own step breakdown (train/ps/marks.py), shown beside the prediction
            cell.setdefault("parts", []).append(parts)
    return out


def _wire_ms(record: dict) -> tuple[float | None, str]:
    """(ms the link needs for a step's push and pull, note); None when the record has no bytes."""
    metrics, net = record.get("metrics") or {}, record.get("network") or {}
    nbytes = metrics.get("comm_bytes_per_step") or metrics.get("grad_bytes")
    if not nbytes or not net.get("rate_gbit"):
        return None, "wire not priced: the record gives no bytes a step" if net.get("rate_gbit") else \
            "wire not priced: no link rate"
    k = int(record["config"].get("k_steps") or 1) if record["method"] == "geo" else 1
    remote = 2 * nbytes * (record["nodes"] - 1) / record["nodes"] / k
    share, why = links.delivered(net.get("transport"), None, net["rate_gbit"], net.get("sockets") or 0)
    return remote / (net["rate_gbit"] / 8 * share * 1e9) * 1e3, f"wire {remote / 1e6:.2f} MB a step over {why}"


def predict(fit: list[dict], held_out: list[dict]) -> list[dict]:
    """A validation row for every multi-node PS cell of `held_out`: predicted from the 1-node cell of
    the same work and workers in `fit`, or not predicted with why."""
    refs = {(k[0], k[3]): v for k, v in _cells(fit).items() if k[2] == 1}
    rows = []
    for (work, network, nodes, world), cell in sorted(_cells(held_out).items(), key=str):
        if nodes == 1:
            continue
        record, measured = cell["record"], statistics.mean(cell["runs"])
        k = (record.get("config") or {}).get("k_steps")
        row = {"cell": f"{record['benchmark']} {record.get('preset') or ''} {record['method']} PS"
                       f"{f' [k_steps {k}]' if k else ''} {network or 'local'} {nodes}x{record['devices_per_node']}",
               "benchmark": record["benchmark"], "preset": record.get("preset"), "method": record["method"],
               "network": network, "nodes": nodes, "devices_per_node": record["devices_per_node"],
               "world_size": world, "measured_step_ms": measured, "source": experiment.source_name(record),
               "notes": [parts_note(cell["parts"])] if cell.get("parts") else [],
               "error": None, "predicted_step_ms": None}
        ref = refs.get((work, world))
        if ref is None:
            row["not_predicted"] = "parameter server: no fitted 1-node run of this work with as many workers"
            rows.append(row)
            continue
        base = statistics.mean(ref["runs"])
        wire, note = _wire_ms(record)
        step = base + max(0.0, (wire or 0.0) - base)
        throughput = statistics.mean(cell["throughput"])
        row.update(predicted_step_ms=step, error=step / measured - 1, measured_throughput=throughput,
                   predicted_throughput=throughput * measured / step, throughput_error=measured / step - 1,
                   notes=[f"base: the 1-node run of {world} workers, {base:.1f} ms a step", note,
                          "the communicator hides the wire behind a step", *row["notes"]])
        rows.append(row)
    return rows
