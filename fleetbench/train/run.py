"""The run layer: what every benchmark script does that is not its family's (collective loop,
parameter-server driver, communication benchmark) nor its model's.

    from fleetbench.train import run

    bench = run.start(script, ConfigClass, family, argv=None, checks=(check, ...))
        # The script's name comes from the registry (registry.name_for_script). Parses
        # --preset/--set/--results/--check into a validated config (the parser checks that
        # --results can be appended to) and runs each `check(cfg)`; any bad input is one line on stderr and exit 2,
        # before anything starts. With --check it prints the resolved config as JSON and
        # returns with bench.check_only set: the caller launches nothing.
    bench.name, bench.family, bench.cfg, bench.preset, bench.results_path, bench.unit
    bench.unit_for(workload)           # the registry's unit, else workload.unit, else samples/s
    where = run.Placement(rank, world_size, nodes, runtime={"device": "cpu"})
        # this process in its job: rank 0 reports; runtime joins the record's config.runtime
    bench.record_for(where, metrics, error) -> record
        # the one record: benchmark, mode (family), method (the family's config key, see
        # registry.METHOD_KEY), preset, resolved config with its runtime block (threads, Paddle
        # version, where.runtime), nodes, devices_per_node, world_size, metrics, error
    bench.store_result(where, metrics) -> exit code
        # rank 0 prints FLEETBENCH_RESULT and appends the record, then its summary line
        # (measure/resultline; outside a supervisor, which prints it itself); 0, or 1 with one
        # line on stderr naming the store when it cannot be written (the record stays in the rank's log)
    bench.store_failure(where, error)
        # a failed run is a result: rank 0 stores it with `error` set, except under
        # `fleetbench launch` (the contract's JOB_ID set), whose supervisor stores the failure
    run.peak_memory_mib(device)        # this process's peak: allocator on GPU, resident set on CPU
    run.Workload                       # base of what a script's build(cfg) returns

The metrics' names and definitions are fleetbench.measure.metrics'.
"""
import dataclasses
import json
import resource
import sys
from typing import Callable, Iterable, Optional

import fleetbench
from fleetbench import cmdline
from fleetbench.machine import stamp
from fleetbench.measure import config, contract, metrics, registry, resultline
from fleetbench.measure.interference import CpuSample
from fleetbench.store import results


@dataclasses.dataclass(kw_only=True)
class Workload:
    """What a script's build(cfg) returns; each family adds its own fields."""

    optimizer: object
    unit: Optional[str] = None  # only for scripts outside the registry, whose unit it cannot say


@dataclasses.dataclass
class Placement:
    """This process in its job, as the record states it."""

    rank: int  # collective rank or PS worker index; rank 0 reports
    world_size: int  # processes that train (PS: workers)
    nodes: int
    runtime: dict = dataclasses.field(default_factory=dict)  # family facts for config.runtime

    @property
    def devices_per_node(self) -> int:
        return max(1, -(-self.world_size // self.nodes))


@dataclasses.dataclass
class Run:
    name: str
    family: str
    cfg: object
    preset: str
    results_path: str
    check_only: bool = False
    unit: Optional[str] = None  # the registry's, for this script (None: a script outside it)
    trace: Optional[str] = None  # --trace DIR: one Chrome trace per rank (train/trace.py)

    def unit_for(self, workload: Workload) -> str:
        return self.unit or workload.unit or "samples/s"

    def record_for(self, where: Placement, metrics: Optional[dict], error: Optional[str]) -> dict:
        import paddle
        resolved = config.to_dict(self.cfg)
        resolved["runtime"] = {"threads": fleetbench.threads_info(), "paddle": paddle.__version__,
                               **where.runtime}
        repeats = contract.RankContract.from_env().repeats  # a sweep's until-stable policy (sweep/adaptive)
        if repeats:
            resolved["runtime"]["repeats"] = repeats
        method = getattr(self.cfg, registry.METHOD_KEY[self.family])
        identity = contract.RunIdentity(benchmark=self.name, mode=self.family, method=method, preset=self.preset,
                                        config=resolved, nodes=where.nodes, devices_per_node=where.devices_per_node,
                                        world_size=where.world_size)
        return stamp.record(identity, metrics, error)

    def store_result(self, where: Placement, metrics: dict) -> int:
        if where.rank != 0:
            return 0
        record = self.record_for(where, metrics, None)
        code = self._emit(record)
        # under a supervisor (fleetbench launch, a sweep) the launcher prints it from the store
        if code == 0 and contract.RankContract.from_env().job_id is None:
            print(resultline.line(resultline.fields_of(record, self.results_path)), flush=True)
        return code

    def store_failure(self, where: Placement, error: str | BaseException) -> None:
        # Under `fleetbench launch` the supervisor stores the failure, naming the rank that failed
        # first (which need not be this one); a second record would count one run twice.
        if where.rank == 0 and contract.RankContract.from_env().job_id is None:
            text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
            self._emit(self.record_for(where, None, text))

    def _emit(self, record: dict) -> int:
        try:
            results.emit(self.results_path, record)
        except (OSError, results.RecordError) as err:  # StoreError names the store and the log line
            line, marker = str(err), results.RESULT_PREFIX.strip()
            if marker not in line:
                line += f"; the record is kept in this rank's log as the {marker} line"
            print(f"{self.name}: error: {line}", file=sys.stderr, flush=True)
            return 1
        return 0


def arg_parser(benchmark: str) -> cmdline.Parser:
    """A benchmark script's command line (the run layer's: every script has the same flags)."""
    parser = cmdline.Parser(prog=benchmark, description=f"fleetbench {benchmark} benchmark")
    parser.add_argument("--preset", default="full", type=cmdline.TEXT, help="named preset (default: full)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", type=config.SETTING,
                        help="override a config key, e.g. --set batch_size=64 --set data.path=/data")
    parser.add_argument("--results", default=registry.DEFAULT_RESULTS, type=results.STORE,
                        help=f"JSONL store (default {registry.DEFAULT_RESULTS})")
    parser.add_argument("--trace", type=cmdline.OUTPUT_DIR, metavar="DIR",
                        help="write one Chrome trace (JSON) per rank into DIR: steps and their parts "
                             "(collective benchmarks; docs/guide/traces.md)")
    parser.add_argument("--check", action="store_true",
                        help="validate the configuration, print it as JSON and exit (launches nothing)")
    return parser


def parse_args(benchmark: str, cls: type, argv: list[str] | None = None) -> tuple:
    """(config, args) of a benchmark's command line; on a bad config one line and exit 2."""
    args = arg_parser(benchmark).parse_args(argv)
    try:
        cfg = config.build(benchmark, cls, args.preset, args.sets)
    except config.ConfigError as err:
        config.exit_config_error(benchmark, err)
    return cfg, args


def start(script: str, cls: type, family: str, argv: list[str] | None = None,
          checks: Iterable[Callable] = ()) -> Run:
    """Parse and check a benchmark's command line (see the module docstring)."""
    name = registry.name_for_script(script)
    bench = registry.for_script(script)
    if bench is not None and bench.family != family:
        raise RuntimeError(f"{script} is registered as a {bench.family} benchmark, not {family}")
    cfg, args = parse_args(name, cls, argv)
    try:
        seed = contract.RankContract.from_env().seed
        if seed is not None:  # a sweep varying the seed by repeat (sweep/adaptive.py): the record says which
            config.assign(cfg, "seed", seed, source=contract.SEED)
        for check in checks:
            check(cfg)
    except (config.ConfigError, ValueError) as err:  # ValueError: a data reader's, or a contract variable's, one line
        config.exit_config_error(name, err)
    except OSError as err:
        config.exit_config_error(name, f"{err.filename}: {err.strerror}")
    if args.trace and family not in ("collective", "ps"):  # a trace holds training steps and their parts
        config.exit_config_error(name, f"--trace {args.trace}: the {family} family writes no trace "
                                       "(expected a collective or parameter-server benchmark)")
    if args.trace and family == "ps" and not cfg.measure.breakdown:  # its spans are the marks'
        if "measure.breakdown" in map(config.setting_key, args.sets):
            config.exit_config_error(name, f"--trace {args.trace}: a parameter-server trace is its step "
                                           "breakdown's marks (expected measure.breakdown true)")
        config.assign(cfg, "measure.breakdown", True, source="--trace")  # off by default (their cost)
    if args.check:
        check_gpu_ready(name)
        print(json.dumps(config.to_dict(cfg), sort_keys=True), flush=True)
    return Run(name=name, family=family, cfg=cfg, preset=args.preset, results_path=args.results,
               check_only=args.check, unit=bench.unit if bench else None, trace=args.trace)


def check_gpu_ready(name: str) -> None:
    """On a CUDA build, --check (and so `fleetbench launch` and `sweep`, which run it before
    anything starts) also asks whether Paddle can load CUDA, cuDNN and NCCL and sees a GPU: one
    line and exit 2 if not, instead of a failure at the first convolution (docs/guide/gpu.md)."""
    import paddle

    from fleetbench.machine import device

    if not paddle.is_compiled_with_cuda() or device.cpu_ranks_asked():
        return
    from fleetbench.machine import env as machine_env
    from fleetbench.machine import gpu_ready

    status, line = gpu_ready.verdict(gpu_ready.probe(), machine_env.read_gpus()[1])
    if status:
        config.exit_config_error(name, f"GPU {line}")


def peak_memory_mib(device: str = "cpu") -> float:
    if device.startswith("gpu"):
        import paddle
        return paddle.device.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def interference(cpu_start: CpuSample | None, cpu_end: CpuSample | None, device: str = "cpu") -> list:
    """This rank's metrics.RankFigures.interference: the CPU counters its timer sampled at the
    measured window's edges (WindowTimer.cpu_start, cpu_end) and, on a GPU, the processes outside
    the job on the job's GPUs at the window's end (machine/gpu_procs.py)."""
    gpu = None
    if device.startswith("gpu") and cpu_end is not None:
        from fleetbench.machine import gpu_procs
        gpu = gpu_procs.others(cpu_end.pids)
    return metrics.interference_row(cpu_start, cpu_end, gpu)
