"""Which role Paddle's launcher gave this process, where it stands in the job, and how many
OpenMP threads it gets. Read from the environment, before paddle starts."""
import dataclasses
import os

import fleetbench
from fleetbench.measure import config, contract
from fleetbench.train import run
from fleetbench.train.ps.config import PSConfig


@dataclasses.dataclass
class Role:
    role: str  # "server" or "worker"
    servers: list  # every server's endpoint
    workers: int
    nodes: int
    local_workers: int  # workers on this node

    def placement(self, worker: int) -> run.Placement:
        return run.Placement(rank=worker, world_size=self.workers, nodes=self.nodes,
                             runtime={"servers": len(self.servers), "workers": self.workers})


def role_from_env() -> Role:
    """The role fleetrun gave this process (ConfigError outside the launcher)."""
    env = os.environ
    role = env.get("TRAINING_ROLE") or env.get("PADDLE_ROLE")
    if role not in ("PSERVER", "TRAINER"):
        raise config.ConfigError("no parameter-server role in the environment: run this script under "
                                 "Paddle's launcher, e.g. `fleetrun --server_num 1 --trainer_num 1 SCRIPT`")
    servers = [e for e in env.get("PADDLE_PSERVERS_IP_PORT_LIST", "").split(",") if e]
    workers = [e for e in env.get("PADDLE_TRAINER_ENDPOINTS", "").split(",") if e]
    hosts = {e.rsplit(":", 1)[0] for e in servers + workers}
    here = env.get("POD_IP")
    if here and hosts and here not in hosts:  # else Paddle's role maker fails with "... is not in list"
        raise config.ConfigError(
            f"the launcher placed this {role.lower()} at {here} (POD_IP: where this host's name resolves, "
            f"e.g. 127.0.1.1 on Debian), an address none of the endpoints uses ({', '.join(sorted(hosts))}): "
            "give the launcher --host with the endpoints' address")
    local = [e for e in servers + workers if e.rsplit(":", 1)[0] == here] if here else []
    return Role(role="server" if role == "PSERVER" else "worker", servers=servers,
                workers=int(env.get("PADDLE_TRAINERS_NUM") or len(workers) or 1),
                nodes=contract.RankContract.from_env(env).nodes or max(1, len(hosts)),
                local_workers=max(1, sum(e in workers for e in local)) if local else 1)


def set_threads(cfg: PSConfig, role: Role) -> None:
    """OpenMP threads per process, unless the user chose: servers mostly wait on the network and
    get 1; the node's cores are shared by its workers' dataset threads (each thread runs whole
    batches, so cores / (local workers x threads), at least 1)."""
    if fleetbench.threads_info()["source"] != "fleetbench":
        return  # chosen by the user, or by the sweep for nodes sharing this machine
    if role.role == "server":
        threads = 1
    else:
        threads = max(1, fleetbench.usable_cores() // (role.local_workers * cfg.data.num_workers))
    os.environ["OMP_NUM_THREADS"] = str(threads)
