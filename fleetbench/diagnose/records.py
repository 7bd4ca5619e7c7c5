"""Diagnosis figures and verdict as ordinary records (mode `diagnose`), so `fleetbench report` and
anyone reading the store can see the health of the cluster a result was measured on."""
from __future__ import annotations

from fleetbench.machine import stamp
from fleetbench.measure import contract
from fleetbench.store import results


def _identity(benchmark: str, nodes: int, cluster: str | None) -> contract.RunIdentity:
    return contract.RunIdentity(benchmark=benchmark, mode="diagnose", method="none", preset=None,
                                config={"cluster": cluster}, nodes=nodes, devices_per_node=1, world_size=nodes)


def store(path: str, report: dict, cluster: str | None) -> None:
    """One record per node (its figures, units in the names) and one for the verdict. `cluster`:
    the emulated cluster's name, "ssh" for hosts given by --hosts/--hostfile, "slurm" for an
    allocation's nodes, None for this machine.
    The records name the hosts (a diagnosis names the sick node): publish them knowingly."""
    count = len(report["nodes"])
    for node in report["nodes"]:
        metrics = {**node["figures"], "node_index": node["index"], "host": node["host"]}
        error = node.get("message") if node["verdict"] == "unreachable" else None
        results.append(path, stamp.record(_identity("diagnose-node", count, cluster), metrics, error))
    keep = ("index", "host", "address", "verdict", "categories", "violations", "explains", "unresolved")
    verdict = {"nodes": [{k: n[k] for k in keep if k in n}
                         for n in report["nodes"]],
               "links": report["links"], "elapsed_s": report["elapsed_s"], "reference": report["reference"],
               **{k: report[k] for k in ("resolution", "not_measured", "remeasured", "resolve_rounds", "cluster")
                  if k in report}}
    results.append(path, stamp.record(_identity("diagnose-verdict", count, cluster), verdict))
