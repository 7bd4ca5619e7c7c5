"""The metrics vocabulary: one definition per name, for every family (docs/reference/metrics.md says the
same in prose, and a test keeps the two in step).

A "rank" is a process that trains: a collective rank, or a parameter-server worker (servers do
not train and report nothing). Each rank measures its own window (`RankFigures`), the job's
figures are reduced across ranks (`reduce`) and turned into a record's metrics (`standard`).
The reduction is the same for both families; only the communicator differs (collective:
paddle.distributed, PS: gloo through fleet.util), so it is passed in.
"""
import dataclasses
import math
from typing import List, Optional, Protocol

from fleetbench.measure import interference

NOT_MEASURED = [math.nan, math.nan, math.nan]  # a rank's interference row when it measured nothing
# The machine-speed probe's figures (machine/speed.py), each at both edges of the measured window:
# PROBE_KEYS in the order of `probe_row` (WindowTimer.probe_figures, a PS process's figures)
PROBE_NAMES = ("probe_gemm_gflops", "probe_triad_gbps", "probe_scalar_mops")
PROBE_KEYS = tuple(f"{name}_{edge}" for name in PROBE_NAMES for edge in ("before", "after"))


def probe_row(before: Optional[List[float]], after: Optional[List[float]]) -> List[float]:
    """A process's probe figures at both edges (each in PROBE_NAMES' order, None: not probed) in
    PROBE_KEYS' order, NaN where an edge was not probed."""
    nan = [math.nan] * len(PROBE_NAMES)
    return [x for pair in zip(before or nan, after or nan) for x in pair]

# name -> definition. Family-specific names say which family reports them.
DEFINITIONS = {
    "throughput": "work of all ranks in the measured window / elapsed_s, in `unit`",
    "unit": "what throughput counts: images/s, tokens/s, examples/s, words/s or samples/s",
    "throughput_per_device": "throughput / world_size",
    "samples_per_s": "samples (images, sequences, pairs, examples) of all ranks in the measured "
                     "window / elapsed_s",
    "step_time_ms": "1000 x elapsed_s / measured_steps: the slowest rank's wall time per one of its "
                    "own optimizer steps",
    "reader_time_ms": "the largest total wait for input of any rank in the measured window / "
                      "measured_steps; null where reading happens inside the step (PS)",
    "peak_mem_mib": "largest peak memory of any rank: resident set on CPU, allocator peak on GPU",
    "loss_first": "mean over ranks of each rank's mean loss in its first logging window",
    "loss_last": "mean over ranks of each rank's mean loss in its last logging window",
    "elapsed_s": "wall time of the slowest rank's measured window (warm-up excluded)",
    "rank_elapsed_s": "every rank's own measured-window wall time, by rank",
    "rank_step_ms": "every rank's own wall time per step (1000 x its elapsed_s / its steps), by rank; "
                    "a synchronised job makes every rank wait for the slowest, so they differ in a "
                    "method=none control or an unsynchronised (PS) job",
    "rank_reader_ms": "every rank's own wait for input per step, by rank; null where reading happens "
                      "inside the step (PS)",
    "measured_steps": "optimizer steps the slowest rank ran in its measured window",
    "warmup_steps": "optimizer steps each rank ran before its measured window",
    "omp_num_threads": "OpenMP threads of the reporting rank (rank 0)",
    "interference_cpu_pct": "% of the machine's CPU time (all cores, steal included) in the measured window "
                            "spent outside the job's processes (measure/interference.py); the most disturbed "
                            "rank's machine; null where /proc cannot be read. Above stability.DISTURBED_PCT the "
                            "run is disturbed: shown, left out of its cell's figure",
    "job_cpu_pct": "% of the machine's CPU time in the measured window spent by the job's own processes "
                   "(the same rank's machine as interference_cpu_pct)",
    "interference_gpu_procs": "processes outside the job on the GPUs the job used (nvidia-smi), at the "
                              "window's edges, the most of any rank; null on CPU runs or where nvidia-smi "
                              "cannot tell; any makes the run disturbed",
    "probe_gemm_gflops_before": "GFLOP/s of the machine-speed probe's fixed GEMM (machine/speed.py, `probe` "
                                "defines it) just before the measured window, the slowest rank's; null when "
                                "measure.probe is off. A run whose probe is far from its cell's median or from its "
                                "own other edge is disturbed (stability.probe_reason)",
    "probe_gemm_gflops_after": "the same GEMM just after the measured window, the slowest rank's",
    "probe_triad_gbps_before": "GB/s of the probe's fixed triad (memory bandwidth) just before the window, the "
                               "slowest rank's",
    "probe_triad_gbps_after": "the same triad just after the window, the slowest rank's",
    "probe_scalar_mops_before": "million iterations a second of the probe's fixed interpreter loop (scalar code: "
                                "what the one-thread GEMM does not see) just before the window, the slowest rank's",
    "probe_scalar_mops_after": "the same loop just after the window, the slowest rank's",
    "probe": "the probe's workload: {gemm, triad}, each its definition (sizes, repeats, trials, unit)",
    "step_times_ms": "every rank's wall time of each step of its measured window (ms, step end to step end; "
                     "host time: on a GPU the device runs behind), by rank; empty for epoch runs",
    "warmup_settled": "true: warm-up ended when the step time settled (timing.settled), false: at "
                      "measure.settle_steps without settling; null: a fixed warmup_steps",
    # collective
    "grad_bytes": "collective: bytes of the gradients of the trainable parameters (one rank)",
    "grad_tensors": "collective: number of those gradient tensors",
    "comm_bytes_per_step": "collective: bytes each rank all-reduces per step (0 for one process and "
                           "for method=none; halved by fp16_allreduce; grad_merge syncs once per k steps)",
    "comm_buckets_per_step": "collective: all-reduce calls per step (the method's buckets)",
    "control": "collective: true for method=none, a measurement control (no gradient "
               "synchronisation), never a training result nor an efficiency baseline",
    "step_breakdown": "where each rank's measured step goes, in ms per measured step by rank; collective "
                      "(train/phases.py): step, reader, forward, backward (less the communication "
                      "inside it), comm (time inside gradient-communication calls), comm_wait (of comm, "
                      "the wait for the last rank), comm_in_backward, comm_blocking (on the step's "
                      "thread), optimizer, other (what no part covers), covered (1 - |other|/step); "
                      "adds_up: every rank covered to within tolerance (0.05). ps (family: ps; "
                      "train/ps/marks.py): by worker step, reader, pull, compute, push, meter, "
                      "client_cpu (CPU ms a step of the PS client's own threads: communicator, brpc; "
                      "null where /proc cannot say), other, covered; servers: each "
                      "server's cpu_s over the slowest worker's window, window_s, busy (cpu_s / window_s)",
    "trace_files": "with --trace (collective and ps): the Chrome trace of each rank, by rank (absolute paths)",
    "ps_probe": "ps: the machine-speed probe's figures (the probe_* keys) of every worker, by worker, and "
                "of every server, by server (endpoint; null where its machine has no worker)",
    "model_flops_per_sample": "collective: training FLOPs per sample = forward MACs x 2 x 3 "
                              "(measure/flops.py), FLOP",
    "peak_flops": "collective: the job's peak FLOP/s: devices.py's dense peak at the run's precision x "
                  "GPUs, or the sum of every CPU rank's measured fp32 GEMM rate, FLOP/s",
    "peak_flops_source": "collective: where peak_flops came from (the GPU and precision, or the GEMM probe)",
    "mfu": "collective: model FLOPs utilisation, model_flops_per_sample x samples_per_s / peak_flops "
           "(a fraction, 0-1)",
    # collective runs with a held-out split (fleetbench.train.epochs; docs/guide/convergence.md)
    "epochs": "epoch runs: one object per epoch (epoch, epoch_time_s, test_time_s, test_accuracy, "
              "test_top5, test_loss, test_examples, throughput, train_loss, elapsed_s, run_elapsed_s)",
    "final_test_accuracy": "epoch runs: top-1 accuracy over the whole held-out split after the last epoch",
    "final_test_top5": "epoch runs: top-5 accuracy after the last epoch; null with 5 classes or fewer",
    "target_accuracy": "epoch runs: the config's target test accuracy, or null",
    "time_to_target_s": "epoch runs: wall time from run_start (before the data is read) to the end of the "
                        "first evaluation at >= target_accuracy, evaluations included; null when none reached it",
    "epochs_to_target": "epoch runs: the epoch (from 1) of that evaluation; null when none reached it",
    "lr_effective": "epoch runs: the learning rate the optimizer was built with (e.g. lr x world size)",
    "steps_per_epoch": "epoch runs: optimizer steps of one epoch on each rank",
    "seed": "epoch runs: the seed the run used (a sweep with vary_seed gives each repeat its own)",
    "init_s": "epoch runs: the script's main until run_start (Fleet's rendezvous), slowest rank; not in "
              "time_to_target_s",
    "setup_s": "epoch runs: run_start to the first training step (data read, model built), slowest rank; "
               "in time_to_target_s",
    # parameter server
    "workers": "ps: trainer processes (the record's world_size)",
    "passes": "ps and collective ctr: passes over each worker's (rank's) files",
    "examples": "ps: input lines trained in the measured window, all workers",
    "valid_lines": "ps and collective ctr: lines the data pipes (the rank's reader) accepted, all "
                   "workers, warm-up included (resnet18 ps: examples the image pipe wrote)",
    "invalid_lines": "ps and collective ctr: lines the data pipes (the rank's reader) skipped as malformed, all workers",
    "load_s": "ps: the slowest worker's InMemoryDataset load time (0 for QueueDataset), not in elapsed_s",
    # CTR, both families (fleetbench.train.workloads.ctr; docs/guide/allreduce_vs_ps.md)
    "logloss": "ctr: mean log loss per example over the measured window, each batch scored before its update",
    "auc": "ctr: AUC (fleetbench.measure.auc) of the measured window's predictions, each scored before "
           "its update, all ranks' buckets together",
    "table_bytes": "ctr collective: bytes of the embedding table, replicated on every rank",
    "embedding_grad_bytes_per_step": "ctr collective: bytes of the table's gradient each rank sends per "
                                     "step: the whole table all-reduced (sparse_grad=false), or one row "
                                     "(int64 id + values) per lookup all-gathered (sparse_grad=true)",
    "analogy_accuracy": "ps: 3CosAdd analogy accuracy of the trained vectors (Word2Vec, optional)",
    "analogy_questions": "ps: analogy questions answered",
    "analogy_skipped": "ps: analogy questions skipped (a word outside the analogy vocabulary)",
    # GPT (collective/gpt.py, fleetbench/train/hybrid.py; docs/guide/gpt.md)
    "flops_per_token": "gpt: training FLOPs a token, model FLOPs (measure/flops.py: matrix multiplications, "
                       "attention scores counted whole, no recomputation)",
    "model_tflops_per_device": "gpt: flops_per_token x throughput_per_device / 1e12",
    "mfu": "gpt: model_tflops_per_device / the device's peak at the run's precision (measure/devices.py); "
           "null on a CPU, whose peak the table does not hold",
    "parallel": "gpt: the split: dp/mp/pp/sharding degrees Fleet was given, sharding_stage, sequence_parallel, "
                "recompute, accumulate_steps (micro-batches a pipeline step)",
}


@dataclasses.dataclass
class RankFigures:
    """One rank's measured window."""

    elapsed_s: float
    steps: int  # optimizer steps in the window
    samples: float
    units: float  # what the benchmark's unit counts
    reader_s: Optional[float]  # total wait for input; None where the step reads (PS)
    peak_mem_mib: float
    loss_first: float
    loss_last: float
    # [interference_cpu_pct, job_cpu_pct, interference_gpu_procs] of its window, NaN where not measured
    interference: List[float] = dataclasses.field(default_factory=lambda: list(NOT_MEASURED))
    # the speed probe's figures at the window's edges (PROBE_KEYS' order), NaN where not probed
    probe: List[float] = dataclasses.field(default_factory=lambda: [math.nan] * len(PROBE_KEYS))
    step_s: List[float] = dataclasses.field(default_factory=list)  # the measured window's step times
    warmup_steps: Optional[int] = None  # the warm-up it ran (None: the config's warmup_steps)
    warmup_settled: Optional[bool] = None  # timing.Steady.was_settled


def interference_row(cpu_start, cpu_end, gpu_procs: Optional[int] = None) -> List[float]:
    """A rank's RankFigures.interference from its timer's CPU samples (WindowTimer.cpu_start,
    cpu_end) and, on a GPU, the other processes on the job's GPUs (machine/gpu_procs.py)."""
    figures = interference.window(cpu_start, cpu_end)
    return [math.nan if v is None else float(v) for v in
            (figures["interference_cpu_pct"], figures["job_cpu_pct"], gpu_procs)]


@dataclasses.dataclass
class Totals:
    """The job's window, reduced across ranks."""

    elapsed_s: float  # the slowest rank's
    rank_elapsed_s: List[float]
    steps: int  # the slowest rank's
    samples: float  # summed
    units: float  # summed
    reader_s: Optional[float]  # the largest
    peak_mem_mib: float  # the largest
    loss_first: float  # mean over ranks
    loss_last: float
    rank_step_ms: List[float] = dataclasses.field(default_factory=list)
    rank_reader_ms: Optional[List[float]] = None  # None where the step reads (PS)
    interference: dict = dataclasses.field(default_factory=dict)  # interference.combine over ranks
    probe: dict = dataclasses.field(default_factory=dict)  # PROBE_KEYS: the slowest rank's
    step_times_ms: List[List[float]] = dataclasses.field(default_factory=list)  # by rank
    warmup_steps: Optional[int] = None  # the most any rank ran
    warmup_settled: Optional[bool] = None  # every rank's settled (rank 0's view: ranks agree)


class Communicator(Protocol):
    """What `reduce` needs of the ranks' communicator; every rank calls each method together."""

    def sum(self, values: list) -> list: ...

    def max(self, values: list) -> list: ...

    def gather(self, values: list) -> List[list]: ...  # every rank's values, by rank


class Alone:
    """The communicator of a job of one rank."""

    def sum(self, values):
        return list(values)

    def max(self, values):
        return list(values)

    def gather(self, values):
        return [list(values)]


def reduce(mine: RankFigures, comm: Communicator) -> Totals:
    sums = comm.sum([mine.samples, mine.units, mine.loss_first, mine.loss_last])
    maxes = comm.max([mine.reader_s or 0.0, mine.peak_mem_mib])
    per_rank = comm.gather([mine.elapsed_s, mine.steps, mine.reader_s or 0.0])
    disturbed = interference.combine(comm.gather(list(mine.interference)))
    probes = comm.gather(list(mine.probe))
    step_lists = gather_ragged(comm, [1000 * t for t in mine.step_s])
    warmup = comm.max([-1 if mine.warmup_steps is None else mine.warmup_steps])[0]
    slowest = max(range(len(per_rank)), key=lambda rank: per_rank[rank][0])
    ranks = len(per_rank)
    per_step = [(1000 * elapsed / max(1, steps), 1000 * reader / max(1, steps))
                for elapsed, steps, reader in per_rank]
    return Totals(elapsed_s=float(per_rank[slowest][0]), rank_elapsed_s=[float(r[0]) for r in per_rank],
                  steps=int(per_rank[slowest][1]), samples=float(sums[0]), units=float(sums[1]),
                  reader_s=None if mine.reader_s is None else float(maxes[0]),
                  peak_mem_mib=float(maxes[1]), loss_first=sums[2] / ranks, loss_last=sums[3] / ranks,
                  rank_step_ms=[step for step, _ in per_step],
                  rank_reader_ms=None if mine.reader_s is None else [reader for _, reader in per_step],
                  interference=disturbed, probe=slowest_probe(probes),
                  step_times_ms=[[round(t, 3) for t in row] for row in step_lists],
                  warmup_steps=None if warmup < 0 else int(warmup), warmup_settled=mine.warmup_settled)


def slowest_probe(per_rank: List[list]) -> dict:
    """Each probe figure's lowest over the ranks that measured it (the slowest machine decides, as
    throughput's slowest rank does); None where none did."""
    out = {}
    for i, key in enumerate(PROBE_KEYS):
        measured = [row[i] for row in per_rank if row[i] == row[i]]
        out[key] = min(measured) if measured else None
    return out


def gather_ragged(comm: Communicator, values: List[float]) -> List[List[float]]:
    """Every rank's list, by rank, when their lengths may differ (PS workers run their own step
    counts): padded with NaN to the longest for the gather, the padding dropped after."""
    longest = int(comm.max([float(len(values))])[0])
    if longest == 0:  # nothing to gather (epoch runs keep no step times); every rank knows it
        return []
    rows = comm.gather(list(values) + [math.nan] * (longest - len(values)))
    return [[v for v in row if v == v] for row in rows]


def standard(totals: Totals, unit: str, world_size: int, warmup_steps: int, *, threads: dict,
             probe: Optional[dict] = None) -> dict:
    """The metrics every record has (see DEFINITIONS); a family adds its own names. `threads`: the
    process's thread record (`fleetbench.threads_info()`), `probe`: the speed probe's definition
    (machine/speed.DEFINITION), both passed in: measure/ imports no room above it."""
    elapsed = totals.elapsed_s
    throughput = totals.units / elapsed
    reader_ms = None if totals.reader_s is None else 1000 * totals.reader_s / totals.steps
    return {
        "throughput": throughput, "unit": unit, "throughput_per_device": throughput / world_size,
        "samples_per_s": totals.samples / elapsed,
        "step_time_ms": 1000 * elapsed / totals.steps, "reader_time_ms": reader_ms,
        "peak_mem_mib": totals.peak_mem_mib,
        "loss_first": totals.loss_first, "loss_last": totals.loss_last,
        "elapsed_s": elapsed, "rank_elapsed_s": totals.rank_elapsed_s,
        "rank_step_ms": totals.rank_step_ms, "rank_reader_ms": totals.rank_reader_ms,
        "measured_steps": totals.steps,
        "warmup_steps": warmup_steps if totals.warmup_steps is None else totals.warmup_steps,
        "warmup_settled": totals.warmup_settled, "step_times_ms": totals.step_times_ms,
        **{key: totals.probe.get(key) for key in PROBE_KEYS},
        "probe": probe if any(totals.probe.get(key) is not None for key in PROBE_KEYS) else None,
        "omp_num_threads": threads["omp_num_threads"],
        **(totals.interference or interference.combine([NOT_MEASURED])),
    }


def rank_line(rank: int, mine: RankFigures) -> str:
    """The line each rank logs at the end (tests and readers of logs check the record against it)."""
    return (f"rank {rank} measured_steps {mine.steps} elapsed_s {mine.elapsed_s:.6f} "
            f"samples {mine.samples:.0f} units {mine.units:.0f}")
