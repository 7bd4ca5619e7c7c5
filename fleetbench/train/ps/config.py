"""What a parameter-server script declares: its config (a PSConfig) and what its build(cfg)
returns (a Workload). Imports no paddle: the config is checked before paddle starts."""
import dataclasses
from pathlib import Path
from typing import Callable, Optional

from fleetbench.measure import config
from fleetbench.train import run

MODES = ("sync", "async", "geo")
DATASETS = ("InMemoryDataset", "QueueDataset")
# Why mode=sync is refused: measured on paddlepaddle 2.6.2 (CPU), evidence in docs/guide/ps.md.
SYNC_REFUSAL = (
    "config key 'mode' is 'sync', which Paddle 2.6.2's CPU parameter server cannot run: its sync "
    "trainer program ends every step with send_barrier, which calls a Communicator that "
    "TheOnePSRuntime._init_worker never creates in sync mode (segfault in SendBarrierOp); creating "
    "one unstarted makes the barrier a no-op and dense parameters are never pulled, and starting it "
    "deadlocks because dense gradients bypass its send queue (docs/guide/ps.md#sync-mode-why-it-is-refused); use mode=async or mode=geo")


@dataclasses.dataclass
class PSConfig(config.BenchConfig):
    mode: str = "async"  # async | geo (sync: refused, see SYNC_REFUSAL)
    k_steps: int = 100  # geo: local steps between parameter exchanges with the servers
    dataset: str = "InMemoryDataset"  # or QueueDataset (streams files each pass)
    passes: int = 1  # passes over each worker's files; all of them are timed (minus warm-up)
    # a worker whose fleet.init_worker has not returned by then leaves with its stack (exit 1): Paddle
    # 2.6.2's start-up barrier can deadlock (paddle26.init_deadline); fleetbench launch starts the
    # job once more. Below a sweep's default start-up watchdog (300 s), which would otherwise stop the
    # job first, as "stalled", with no second attempt. Raise it when pushing the initial tables takes longer.
    init_timeout_s: float = 120.0

    def validate(self) -> None:
        super().validate()
        config.require(self.mode in MODES, "mode", "must be async or geo", self.mode)
        if self.mode == "sync":
            raise config.ConfigError(SYNC_REFUSAL)
        config.require(self.k_steps >= 1, "k_steps", "must be >= 1", self.k_steps)
        config.require(self.dataset in DATASETS, "dataset", "must be InMemoryDataset or QueueDataset",
                       self.dataset)
        config.require(self.passes >= 1, "passes", "must be >= 1", self.passes)
        config.require(self.init_timeout_s > 0, "init_timeout_s", "must be > 0 seconds", self.init_timeout_s)
        config.require(self.data.num_workers >= 1, "data.num_workers",
                       "is the dataset thread count and must be >= 1", self.data.num_workers)
        if self.data.path is not None and not Path(self.data.path).exists():
            raise config.ConfigError(f"config key 'data.path': {self.data.path}: no such file or directory")


@dataclasses.dataclass(kw_only=True)
class Workload(run.Workload):
    inputs: list  # static data vars, in the order the pipe writes the slots
    loss: object  # mean loss of a batch
    pipe_command: str  # reads raw lines on stdin, writes MultiSlot lines; `--stats FILE` is appended
    units_var: object = None  # per-example count of units (e.g. corpus words); None: 1 per example
    auc_stats: Optional[tuple] = None  # (stat_pos, stat_neg) of paddle.static.auc
    loss_is_logloss: bool = False  # the loss is the mean log loss (then stored as metrics.logloss)
    # worker 0, after the last pass, while the servers still hold the tables: () -> extra metrics
    after_training: Optional[Callable[[], dict]] = None
