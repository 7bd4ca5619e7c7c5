"""A supervised job, as `fleetbench launch` and `fleetbench sweep` run it.

The API both use: NodeLaunch.paddle() plans one Paddle launcher (one per node), supervise() runs
the launchers to an Outcome (fleetbench.cluster.supervisor), and the failure record is stored
with fleetbench.cluster.failure.store_failure. Commands are argument lists; nothing goes
through a shell.
"""
import dataclasses
import os
import sys
import time
import uuid

from fleetbench.cluster.rankwrap import SUPERVISOR_ENV
from fleetbench.cluster.supervisor import Limits, Supervisor
from fleetbench.measure import registry

# Paddle's launchers run a .py file per rank; this one runs the module fleetbench.cluster.rankwrap.
WRAPPER_ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "entry", "fleetbench_rank.py")
# Environment a caller may have inherited from an enclosing job; it would re-rank our launcher.
RANK_ENV = ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT",
            "PADDLE_GLOBAL_RANK", "PADDLE_LOCAL_RANK", "PADDLE_GLOBAL_SIZE", "PADDLE_LOCAL_SIZE",
            "PADDLE_RANK_IN_NODE", "PADDLE_MASTER", "PADDLE_NNODES", "PADDLE_RANK", "PADDLE_LOG_DIR",
            "PADDLE_JOB_ID", "PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_PORT", "PADDLE_ROLE", "TRAINING_ROLE",
            "POD_IP", "POD_NAME", "PADDLE_DISTRI_BACKEND", registry.JOB_ENV, SUPERVISOR_ENV)

__all__ = ["NodeLaunch", "Limits", "supervise", "child_env", "paddle_command", "new_log_dir"]


def child_env(base=None, extra=None):
    """The launcher's environment: the caller's, minus inherited rank variables, with the
    user's own OMP_NUM_THREADS choice (if any) passed on explicitly (see fleetbench/__init__)."""
    import fleetbench  # imported for its record of the user's thread choice

    env = dict(os.environ if base is None else base)
    for key in RANK_ENV:
        env.pop(key, None)
    env.pop("OMP_NUM_THREADS", None)  # importing fleetbench set it for *this* process
    if fleetbench._USER_THREADS:
        env["FLEETBENCH_OMP_THREADS"] = str(fleetbench._USER_THREADS)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(registry.REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def paddle_command(paddle_flags, log_dir, script, script_args, python=sys.executable):
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
    def paddle(cls, flags, log_dir, script, script_args, env, name="node0", prefix=()):
        """Paddle's launcher with `flags` running SCRIPT under the rank wrapper; `prefix` runs
        it inside something (e.g. `ip netns exec NODE`); `env` is complete (see child_env)."""
        return cls([*prefix, *paddle_command(flags, log_dir, script, script_args)], log_dir, env, name)


def supervise(launches, limits, echo=None):
    """Run a job's launchers under supervision until it ends: an Outcome (fleetbench.cluster.failure)."""
    return Supervisor(launches, limits, echo=echo).run()


def new_log_dir(base="log"):
    return os.path.join(base, f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")
