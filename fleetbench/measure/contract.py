"""The contract between whoever starts a job and the ranks it starts, and what a run is.

Launchers (`fleetbench launch`, sweeps, the executors, the Slurm and Kubernetes writers) tell a
rank where it runs through environment variables; the rank's record and its thread count are
built from them. Every such variable is written (`RankContract.to_env`) and read
(`RankContract.from_env`) here, and nowhere else spells its name.

`RunIdentity` is what a run is, apart from what it measured: the same type for a rank's record, a
supervisor's failure record, a sweep's cell and a remote node's job; `store.results.make_record`
builds the record from (identity, metrics, error, env, topology), `machine.stamp.record` with this
machine's env and topology.

Imports nothing of fleetbench's: `fleetbench/__init__` reads the thread variables before paddle.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Mapping, Optional

from fleetbench import cmdline

# The variables, one name each.
NODES = "FLEETBENCH_NODES"  # nodes of the job (may differ in size, "3+2": the ranks cannot infer it)
LAUNCH = "FLEETBENCH_LAUNCH"  # JSON: the record's launch block, {"executor", "hosts" in node order}
NETWORK = "FLEETBENCH_NETWORK"  # JSON: the emulated network the job runs over (profile, rate, delay)
ATTEMPT = "FLEETBENCH_ATTEMPT"  # JSON: {"attempt": 2, "retried_after": ...} of a retried rendezvous
JOB_ID = "FLEETBENCH_JOB_ID"  # set in every process of a supervised job: the job is found by it
# A file the supervisor creates once it has decided the job failed, before it stops it: a rank
# that finishes during the stop (Paddle 3.3.1's ranks outlast SIGTERM's grace) must not store a
# success beside the supervisor's failure record.
STOPPED_FILE = "FLEETBENCH_STOPPED_FILE"
SUPERVISOR = "FLEETBENCH_SUPERVISOR"  # the supervising process (procs.token()): rank wrappers watch it
# Where rank wrappers write their event files: the directory the supervisor reads. Paddle's new
# launcher says its log directory in PADDLE_LOG_DIR, the legacy one (which runs `--worker_num` PS
# jobs) says nothing, and its ranks' events went unseen: a killed server was not named.
EVENTS_DIR = "FLEETBENCH_EVENTS_DIR"
THREADS = "FLEETBENCH_OMP_THREADS"  # OpenMP threads per rank, chosen by the user or a tool
THREADS_BY = "FLEETBENCH_OMP_THREADS_BY"  # who chose THREADS on the user's behalf (said in the record)
LOCAL_PROCS = "FLEETBENCH_LOCAL_PROCS"  # processes started on this node (threads are shared among them)
REPEATS = "FLEETBENCH_REPEATS"  # JSON: a sweep's until-stable policy, kept as config.runtime.repeats
SEED = "FLEETBENCH_SEED"  # a sweep's seed for this repeat (vary_seed): it replaces the config's `seed`


class ContractError(cmdline.UserError):
    """A variable of the contract holds what it cannot hold; the message is one line naming it."""


def _json_object(environ: Mapping[str, str], name: str) -> Optional[dict]:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ContractError(f"{name}: expected a JSON object, got {text!r} ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ContractError(f"{name}: expected a JSON object, got {text!r}")
    return value


def _whole_number(environ: Mapping[str, str], name: str) -> Optional[int]:
    text = environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise ContractError(f"{name}: expected a whole number >= 0, got {text!r}")
    return int(text)


def _positive_int(environ: Mapping[str, str], name: str) -> Optional[int]:
    text = environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ContractError(f"{name}: expected a whole number >= 1, got {text!r}")
    return int(text)


@dataclasses.dataclass
class RankContract:
    """What a launcher tells a rank; None: not said (a script run by hand says nothing)."""

    nodes: Optional[int] = None
    launch: Optional[dict] = None
    network: Optional[dict] = None
    attempt: Optional[dict] = None
    job_id: Optional[str] = None
    stopped_file: Optional[str] = None
    supervisor: Optional[str] = None
    events_dir: Optional[str] = None
    threads: Optional[str] = None
    threads_by: Optional[str] = None
    local_procs: Optional[int] = None
    repeats: Optional[dict] = None
    seed: Optional[int] = None

    def to_env(self) -> dict[str, str]:
        """The variables for the fields that are set (merge into the rank's environment)."""
        plain = {NODES: self.nodes, JOB_ID: self.job_id, STOPPED_FILE: self.stopped_file,
                 SUPERVISOR: self.supervisor, EVENTS_DIR: self.events_dir, THREADS: self.threads, THREADS_BY: self.threads_by,
                 LOCAL_PROCS: self.local_procs, SEED: self.seed}
        env = {name: str(value) for name, value in plain.items() if value is not None}
        for name, value in ((LAUNCH, self.launch), (NETWORK, self.network), (ATTEMPT, self.attempt),
                            (REPEATS, self.repeats)):
            if value is not None:
                env[name] = json.dumps(value, sort_keys=True)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "RankContract":
        """The contract as this process's environment states it; ContractError on a malformed value."""
        text = lambda name: environ.get(name) or None  # noqa: E731
        return cls(nodes=_positive_int(environ, NODES), launch=_json_object(environ, LAUNCH),
                   network=_json_object(environ, NETWORK), attempt=_json_object(environ, ATTEMPT),
                   job_id=text(JOB_ID), stopped_file=text(STOPPED_FILE), supervisor=text(SUPERVISOR),
                   events_dir=text(EVENTS_DIR),
                   threads=text(THREADS), threads_by=text(THREADS_BY),
                   local_procs=_positive_int(environ, LOCAL_PROCS), repeats=_json_object(environ, REPEATS),
                   seed=_whole_number(environ, SEED))

    def launch_block(self) -> Optional[dict]:
        """The record's `launch`: the launcher's block, plus attempt/retried_after on a second attempt."""
        if self.launch is None:
            return None
        return dict(self.launch, **self.attempt) if self.attempt else dict(self.launch)


@dataclasses.dataclass(kw_only=True)
class RunIdentity:
    """What a run is, apart from what it measured: every record field that is not a measurement
    nor filled in by the store (id, time, env, topology, git)."""

    benchmark: str
    mode: str  # the family: collective | ps | comm
    method: str
    preset: Optional[str]
    config: dict
    nodes: int
    devices_per_node: int
    world_size: int
    network: Optional[dict] = None  # None: the contract's (FLEETBENCH_NETWORK), if any
    launch: Optional[dict] = None  # None: the contract's (FLEETBENCH_LAUNCH + ATTEMPT), if any

    def resolved(self, contract: Optional[RankContract] = None) -> "RunIdentity":
        """This identity with network and launch taken from the contract where it left them out."""
        contract = contract or RankContract.from_env()
        return dataclasses.replace(
            self, network=self.network if self.network is not None else contract.network,
            launch=self.launch if self.launch is not None else contract.launch_block())
