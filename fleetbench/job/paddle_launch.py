"""A supervised job, as `fleetbench launch` and `fleetbench sweep` run it.

The API both use: NodeLaunch.paddle() plans one Paddle launcher (one per node), supervise() runs
the launchers to an Outcome (fleetbench.job.supervisor), and the failure record is stored
with fleetbench.job.failure.store_failure. Commands are argument lists; nothing goes
through a shell.

A job that fails starting up, before any rank has logged a step, is started once more: nothing was
measured, and on an overloaded host Paddle's gloo handshake fails now and then (see
fleetbench.job.messages, meaning RENDEZVOUS), as does a parameter-server start-up barrier that never
releases (messages.START_UP_STUCK; fleetbench.train.ps.paddle26.init_deadline). The second attempt
runs in `attempt2/` under the job's log directory (the first attempt's logs stay), and its record
says so in its `launch` block (`attempt`, `retried_after`); a failed second attempt is stored as
a failure naming both.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TextIO

from fleetbench.job.failure import Outcome
from fleetbench.job.supervisor import Limits, Supervisor
from fleetbench.measure import contract, registry

# Paddle's launchers run a .py file per rank; this one runs the module fleetbench.job.rankwrap.
WRAPPER_ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "entry", "fleetbench_rank.py")
# Environment a caller may have inherited from an enclosing job; it would re-rank our launcher.
RANK_ENV = ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT",
            "PADDLE_GLOBAL_RANK", "PADDLE_LOCAL_RANK", "PADDLE_GLOBAL_SIZE", "PADDLE_LOCAL_SIZE",
            "PADDLE_RANK_IN_NODE", "PADDLE_MASTER", "PADDLE_NNODES", "PADDLE_RANK", "PADDLE_LOG_DIR",
            "PADDLE_JOB_ID", "PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_PORT", "PADDLE_ROLE", "TRAINING_ROLE",
            "POD_IP", "POD_NAME", contract.JOB_ID, contract.STOPPED_FILE, contract.SUPERVISOR)
# Paddle's launcher gives CPU ranks PADDLE_DISTRI_BACKEND=gloo; inherited with an enclosing job's
# rank variables it is that job's, but alone it is a choice (Paddle's own switch to CPU ranks on a
# CUDA build, which the tests use on GPU hosts): then it is passed on.
ENCLOSING_BACKEND = "PADDLE_DISTRI_BACKEND"

# Paddle's launcher takes the ports of servers, trainers, gloo and master from PORT_RANGE (default
# 35100:64000), probing each with a bind it then closes. Most of that is Linux's ephemeral range
# (32768-60999), where any outgoing connection can take the port before the server listens: seen
# as "Fail to listen 127.0.0.1:53298", a PS server that exits 0 and workers waiting forever. Below
# the ephemeral range only other listeners compete.
LAUNCHER_PORT_RANGE = "20000:32000"

__all__ = ["NodeLaunch", "Limits", "supervise", "child_env", "paddle_command", "new_log_dir"]


def child_env(base: dict | None = None, extra: dict | None = None) -> dict:
    """The launcher's environment: the caller's, minus inherited rank variables, with the
    user's own OMP_NUM_THREADS choice (if any) passed on explicitly (see fleetbench/__init__)."""
    import fleetbench  # imported for its record of the user's thread choice

    env = dict(os.environ if base is None else base)
    if any(key in env for key in ("PADDLE_TRAINER_ID", "PADDLE_GLOBAL_RANK")):
        env.pop(ENCLOSING_BACKEND, None)
    for key in RANK_ENV:
        env.pop(key, None)
    env.pop("OMP_NUM_THREADS", None)  # importing fleetbench set it for *this* process
    if fleetbench._USER_THREADS:
        env.update(contract.RankContract(threads=str(fleetbench._USER_THREADS)).to_env())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(registry.REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("PORT_RANGE", LAUNCHER_PORT_RANGE)
    env.update(extra or {})
    return env


def paddle_command(paddle_flags: Sequence[str], log_dir: str, script: str, script_args: Sequence[str],
                   python: str = sys.executable) -> list[str]:
    """The argument list running Paddle's launcher with our rank wrapper around SCRIPT."""
    return [python, "-m", "paddle.distributed.launch", *paddle_flags, "--log_dir", log_dir,
            WRAPPER_ENTRY, script, *script_args]


@dataclasses.dataclass
class NodeLaunch:
    """One Paddle launcher process (one per node in a multi-node job)."""
    cmd: list
    log_dir: str
    env: dict
    name: str = "node0"

    @classmethod
    def paddle(cls, flags: Sequence[str], log_dir: str, script: str, script_args: Sequence[str], env: dict,
               name: str = "node0", prefix: Sequence[str] = ()) -> NodeLaunch:
        """Paddle's launcher with `flags` running SCRIPT under the rank wrapper; `prefix` runs
        it inside something (e.g. `ip netns exec NODE`); `env` is complete (see child_env)."""
        return cls([*prefix, *paddle_command(flags, log_dir, script, script_args)], log_dir, env, name)


START_UP_ATTEMPTS = 2


def supervise(plan: Callable[[str, dict, str], list[NodeLaunch]], log_dir: str, limits: Limits,
              echo: TextIO | None = None, say: Callable[[str], None] | None = None,
              job_id: str | None = None) -> Outcome:
    """Run the job `plan(log_dir, extra_env, job_id)` -> [NodeLaunch] builds under supervision until
    it ends: an Outcome (fleetbench.job.failure). `say` hears about a second attempt."""
    job_id = job_id or uuid.uuid4().hex[:12]
    first_env = {contract.ATTEMPT: ""}  # a value inherited from an enclosing job is not ours
    outcome = Supervisor(plan(log_dir, first_env, job_id), limits, echo=echo, job_id=job_id).run()
    for attempt in range(2, START_UP_ATTEMPTS + 1):
        if not outcome.start_up:
            break
        first = outcome.summary()
        retry_dir = os.path.join(log_dir, f"attempt{attempt}")
        (say or _stderr)(f"fleetbench: the job failed in Paddle's start-up before any step ({outcome.detail}); "
                         f"starting it again, logs in {retry_dir}")
        job_id = uuid.uuid4().hex[:12]
        extra = contract.RankContract(attempt={"attempt": attempt, "retried_after": first}).to_env()
        outcome = Supervisor(plan(retry_dir, extra, job_id), limits, echo=echo, job_id=job_id).run()
        outcome.retried_after = first
    return outcome


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def new_log_dir(base: str = "log") -> str:
    return os.path.join(base, f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")
