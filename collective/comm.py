"""Communication benchmark: Paddle's own collectives timed per message size, in nccl-tests' terms.

    fleetrun --nproc_per_node 2 collective/comm.py                        # all_reduce, 8 B..32 MiB, gloo
    fleetrun --nproc_per_node 2 collective/comm.py --set op=all_reduce,all_gather,broadcast
    fleetrun --gpus 0,1,2,3,4,5,6,7 collective/comm.py --set max_bytes=8589934592   # NCCL
Rank 0 prints one table per op (size, count, type, redop, root, time, algbw, busbw, #wrong) and
stores one record (mode comm). Definitions: docs/guide/comm.md; the arithmetic: fleetbench/comm/opmath.py.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import os
import sys

from fleetbench.comm import collectives, limits, linkprobe, opmath
from fleetbench.measure import config, contract
from fleetbench.train import run
from fleetbench.train import loop


def placement(peers: collectives.Peers) -> run.Placement:
    nodes = max(1, peers.ranks // fleetbench.local_process_count())
    return run.Placement(rank=peers.rank, world_size=peers.ranks, nodes=nodes,
                         runtime={"device": peers.device, "backend": peers.backend})


def measure(cfg: collectives.CommConfig, peers: collectives.Peers) -> dict:
    communicator = loop.PaddleCommunicator()
    machine = collectives.MachineProbe(cfg, peers, communicator)
    link = linkprobe.probe(peers.rank, cfg.tcp_probe_s, communicator)
    machine.edge()  # the probe's edges and the CPU counters just outside the ops, as a training window's
    machine.sample()
    rows = collectives.measure_all(cfg, peers, communicator)
    machine.sample()
    machine.edge()
    figures = dict(opmath.metrics(cfg.ops, rows, peers.ranks, cfg.headline_min_bytes), **link, **machine.figures())
    # what limited the headline op: link, the CPU's reduction or latency (comm/limits.py)
    judged = limits.figures(figures, figures["op"], peers.ranks, contract.RankContract.from_env().network,
                            peers.backend == "gloo", machine.core_share())
    figures["limit"] = limits.judge(judged).to_dict() if judged else None
    return figures


def report(cfg: collectives.CommConfig, peers: collectives.Peers, figures: dict) -> None:
    for op in cfg.ops:
        rows = [r for r in figures["rows"] if r["op"] == op]
        print(opmath.table(op, rows, peers.ranks, cfg.dtype, cfg.redop, figures["ops"][op]), flush=True)
    if figures["link_tcp_GBps"] is not None:
        print(f"# Raw TCP rate between two nodes: {figures['link_tcp_GBps']:.4f} GB/s "
              f"({figures['link_tcp_note']})", flush=True)
    if figures["limit"]:
        print(f"# {figures['op']}: {figures['limit']['text']}", flush=True)


def wrong_summary(rows: list) -> str:
    bad = [f"{r['op']} {r['bytes']} B: {r['wrong']}" for r in rows if r["wrong"]]
    return f"correctness check failed: {sum(r['wrong'] for r in rows)} wrong elements ({'; '.join(bad)})"


def main(argv=None) -> int:
    bench = run.start(__file__, collectives.CommConfig, "comm", argv, checks=[collectives.check_backend])
    if bench.check_only:
        return 0
    ranks = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    if ranks < 2:
        config.exit_config_error(bench.name, f"comm needs 2 ranks or more (got {ranks}): run it under "
                                 "fleetrun --nproc_per_node 2, fleetbench launch or fleetbench sweep")
    peers = collectives.connect()
    try:
        figures = measure(bench.cfg, peers)
    except Exception as err:  # a failed run is a result too: store it, then fail loudly
        bench.store_failure(placement(peers), err)
        raise
    if peers.rank == 0:
        report(bench.cfg, peers, figures)
    if figures["wrong"]:
        print(f"{bench.name}: error: {wrong_summary(figures['rows'])}", file=sys.stderr, flush=True)
        bench.store_failure(placement(peers), wrong_summary(figures["rows"]))
        return 1
    return bench.store_result(placement(peers), figures)


if __name__ == "__main__":
    sys.exit(main())
