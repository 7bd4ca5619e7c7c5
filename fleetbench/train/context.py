"""What a collective rank knows of its place in the job while it trains (Context) and MLPerf's two
moments of its run (RunClock). Apart from the loop so that the methods it calls can name them
without importing the loop that imports them."""
import dataclasses
import time
from typing import Optional

from fleetbench.measure import contract
from fleetbench.train import run
from fleetbench.train.phases import Phases


@dataclasses.dataclass
class Context:
    rank: int
    world_size: int
    local_size: int
    device: str
    # facts learned while setting up (e.g. methods' fp16 wire path), stored in config.runtime
    runtime: dict = dataclasses.field(default_factory=dict)
    # what the method all-reduces per step (methods.comm_plan), stored in the record's metrics
    comm: dict = dataclasses.field(default_factory=dict)
    clock: Optional["RunClock"] = None  # set by main once the ranks are lined up
    precision: Optional[object] = None  # methods.prepare's amp.Precision: evaluation runs under it too
    # the step's parts, timed (train/phases.py): the loop and the methods' steps feed it
    phases: Phases = dataclasses.field(default_factory=lambda: Phases(0))
    macs: Optional[object] = None  # trace.MacCounter: the model's forward MACs, for MFU

    @property
    def placement(self) -> run.Placement:
        # The launcher's node count when it gave one (nodes may differ in size: "3+2"), else
        # what this node's size implies.
        nodes = contract.RankContract.from_env().nodes or max(1, self.world_size // max(1, self.local_size))
        return run.Placement(rank=self.rank, world_size=self.world_size, nodes=nodes,
                             runtime={"device": self.device, **self.runtime})


@dataclasses.dataclass(frozen=True)
class RunClock:
    """MLPerf's two moments: init_start (the script's main began: Fleet's rendezvous and set-up
    follow) and run_start (the ranks lined up, before the workload's build touches the data). Time
    to target counts from run_start; the time before it is initialisation, recorded apart."""

    init_start_ms: float  # wall clock (ms since the epoch), for the :::MLLOG lines
    init_s: float  # init_start -> run_start, this rank
    run_start: float  # time.perf_counter() at run_start
    run_start_ms: float

    @classmethod
    def started(cls, init_start_ms: float, init_start: float) -> "RunClock":
        now = time.perf_counter()
        return cls(init_start_ms=init_start_ms, init_s=now - init_start, run_start=now,
                   run_start_ms=init_start_ms + (now - init_start) * 1000)

    def since_run_start(self) -> float:
        return time.perf_counter() - self.run_start
