"""`fleetbench k8s BENCHMARK|SWEEP.yaml --image IMAGE ...`: Kubeflow PaddleJob manifests.

Kubeflow's training operator (kubeflow.org/v1, kind PaddleJob) runs Paddle jobs as pods: it
sets PADDLE_MASTER, PADDLE_NNODES and PADDLE_JOB_ID in every container, and Paddle's launcher reads
them (paddle/distributed/launch/context/args_envs.py). The operator knows two replica types:
- collective: `Worker` only; worker 0 is the rendezvous; each pod runs one launcher with
  `--nproc_per_node K` (K GPUs with --gpus);
- parameter server: `Master` = the parameter servers and `Worker` = the trainers. The operator sets
  PADDLE_SERVER_NUM=1 on Masters and PADDLE_TRAINER_NUM=1 on Workers (envvar.go, v1.9.0), which alone
  would make every pod run a server and a trainer (Paddle fills the missing count with 1); the pods get
  explicit endpoint lists instead (ps_launch). Its schema has no `PServer` type.
The operator's rules for these fields (webhooks in pkg/webhooks/paddlepaddle/ since 1.8): a DNS-1035
name, replica types Master/Worker only, a container named `paddle` with an image in each, the
rendezvous port named `master`; `problems()` checks them, and tests/unit/test_k8s_crd.py validates
every sweep preset's documents against a copy of the v1.9.0 CRD schema.

Each pod also gets FLEETBENCH_NODES and FLEETBENCH_LAUNCH (executor `kubernetes`, the pod names in
rank order), PORT_RANGE, and in collective jobs POD_IP and PADDLE_RANK from the pod's
`training.kubeflow.org/replica-index` label. Rank 0 (trainer 0 for PS) prints its record as
`FLEETBENCH_RESULT {...}` and Paddle's launcher copies its log to the pod's log:
`kubectl logs NAME-worker-0 > w0.log && fleetbench results import w0.log` (docs/guide/clusters.md).
restartPolicy Never and backoffLimit 0: a failed benchmark run is a result, not something to retry.

On an InfiniBand (or RoCE) cluster a pod needs what NCCL's IB transport needs, or NCCL falls back
to sockets without failing: `--env NCCL_IB_HCA=mlx5 --env NCCL_SOCKET_IFNAME=eth0 ...` (any variable,
every pod) and `--rdma RESOURCE[=N]`, the RDMA device plugin's resource (Mellanox's
k8s-rdma-shared-dev-plugin: rdma/hca_shared_devices_a), with the IPC_LOCK capability verbs need to
pin memory (docs/guide/gpu.md, "Kubernetes on InfiniBand").
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import os
import re
import sys

import yaml

from fleetbench import cmdline
from fleetbench.engines.k8s_flags import (
    CPU,
    DNS1035,
    IMAGE,
    JOB_NAME,
    MEMORY,
    NAMESPACE,
    PER_NODE,
    SERVERS_WORKERS,
    WHAT,
    quantity,
)
from fleetbench.hosts import hostlist
from fleetbench.job.paddle_launch import LAUNCHER_PORT_RANGE
from fleetbench.measure import config, contract, registry

API_VERSION = "kubeflow.org/v1"
KIND = "PaddleJob"
CONTAINER = "paddle"            # the operator looks for a container of this name
PORT_NAME, PORT = "master", 37777
REPLICA_TYPES = ("Master", "Worker")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
INDEX_LABEL = "training.kubeflow.org/replica-index"
POD_RESULTS = "/tmp/fleetbench-results.jsonl"  # the pod's own store (gone with the pod; the log stays)
POD_LOGS = "/tmp/fleetbench-log"
DEFAULT_TIMEOUT_S = 900  # a single job's activeDeadlineSeconds (a sweep cell's default timeout too)
SHM = "/dev/shm"  # GPU pods: NCCL's shared-memory transport outgrows the runtime's 64 MB default
POD_ANNOTATIONS = {"sidecar.istio.io/inject": "false"}
# Variables the manifest or the operator sets in every pod (envvar.go: PADDLE_*, PYTHONUNBUFFERED): not --env's.
OWN_ENV = ("POD_IP", "POD_NAME", "POD_NAMESPACE", "PADDLE_RANK", "PADDLE_MASTER", "PADDLE_NNODES", "PADDLE_JOB_ID",
           "PADDLE_SERVER_NUM", "PADDLE_TRAINER_NUM", "PORT_RANGE", "PYTHONUNBUFFERED")  # Kubeflow's PaddleJob page: no sidecar in the pods


class K8sError(cmdline.UserError):
    """One line naming the flag or sweep cell."""


def job_name(*parts: object) -> str:
    """A DNS-1035 label from parts (lowercase, '-' for anything else), short enough that the
    operator's pod names `<name>-worker-<i>` stay within 63 characters."""
    name = re.sub(r"[^a-z0-9]+", "-", "-".join(str(p) for p in parts if p).lower()).strip("-")
    name = name if name[:1].isalpha() else f"fb-{name}"
    return name[:50].rstrip("-")


def _env(name: str, value: str | None = None, field: str | None = None) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field}}} if field else {"name": name, "value": value}


def _resources(cpu: str | None, memory: str | None, gpus: int | None,
               rdma: tuple[str, int] | None = None) -> dict:
    """Requests and limits (equal: a benchmark's pod is not to be squeezed); `rdma` is (the RDMA
    device plugin's resource name, count)."""
    pairs = (("cpu", cpu), ("memory", memory), ("nvidia.com/gpu", gpus), *([rdma] if rdma else []))
    amounts = {k: str(v) for k, v in pairs if v}
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def container(image: str, workdir: str, command: list[str], env: list[dict], resources: dict,
              rdma: bool = False) -> dict:
    spec = {"name": CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent", "workingDir": workdir,
            "command": command[:1], "args": command[1:], "env": env,
            "ports": [{"containerPort": PORT, "name": PORT_NAME}]}
    if resources:
        spec["resources"] = resources
    if rdma:  # InfiniBand/RoCE verbs register (pin) memory: without IPC_LOCK NCCL's IB transport fails and falls back
        spec["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return spec


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RDMA_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def user_env(pairs: list[str]) -> list[tuple[str, str]]:
    """--env K=V ... as (K, V): NCCL_*, FLAGS_* or any variable the pods need (an InfiniBand
    cluster's NCCL_IB_HCA, NCCL_SOCKET_IFNAME). Names the manifest sets itself are refused."""
    out = []
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not ENV_NAME.fullmatch(name):
            raise K8sError(f"--env {pair!r}: expected NAME=VALUE")
        if name in OWN_ENV or name.startswith("FLEETBENCH_") or name in dict(out):
            raise K8sError(f"--env {name}: {'given twice' if name in dict(out) else 'set by fleetbench k8s or the operator'} "
                           "(expected a variable of your own, once)")
        out.append((name, value))
    return out


def rdma_resource(text: str | None) -> tuple[str, int] | None:
    """--rdma RESOURCE[=N]: the RDMA device plugin's extended resource per pod (e.g.
    rdma/hca_shared_devices_a=1 of Mellanox's k8s-rdma-shared-dev-plugin)."""
    if text is None:
        return None
    name, eq, count = text.partition("=")
    if not RDMA_RESOURCE.fullmatch(name) or (eq and not re.fullmatch(r"[1-9]\d*", count)):
        raise K8sError(f"--rdma {text!r}: expected the device plugin's resource like rdma/hca_shared_devices_a[=1]")
    return name, int(count or 1)


def replica(count: int, cont: dict, command: list[str], gpus: bool) -> dict:
    """One replica type's spec; a deep copy each, so the YAML carries no anchors (shared objects)."""
    cont = copy.deepcopy(cont)
    cont["command"], cont["args"] = command[:1], command[1:]
    pod = {"containers": [cont]}
    if gpus:  # untested here (no GPU): the upstream GPU example's memory emptyDir at /dev/shm
        cont["volumeMounts"] = [{"name": "dshm", "mountPath": SHM}]
        pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    return {"replicas": count, "restartPolicy": "Never",
            "template": {"metadata": {"annotations": dict(POD_ANNOTATIONS)}, "spec": pod}}


def ps_endpoints(name: str, rtype: str, count: int) -> str:
    """Rank-ordered endpoints of one PS replica type, by the Service the operator makes for each pod
    (`<job>-<type>-<i>`), qualified by the namespace so that `-1.` never prefixes `-10.` (Paddle's
    launcher picks a pod's own endpoints by `startswith(host)`, launch/controllers/ps.py)."""
    return ",".join(f"{name}-{rtype}-{i}.$(POD_NAMESPACE):{PORT}" for i in range(count))


def ps_launch(name: str, shape: dict) -> tuple[list[str], list[dict]]:
    """Launcher flags and environment so a Master pod runs only its server and a Worker pod only its
    trainer. The operator sets PADDLE_SERVER_NUM=1 on Masters and PADDLE_TRAINER_NUM=1 on Workers
    (envvar.go) and Paddle's master-mode launcher fills the missing count with 1 (both roles in every
    pod); with explicit --servers/--trainers lists it runs the entries that start with its --host
    (POD_IP), so each pod runs exactly its own. Hostnames, not IPs: untested on a real cluster."""
    flags = ["--servers", ps_endpoints(name, "master", shape["servers"]),
             "--trainers", ps_endpoints(name, "worker", shape["workers"])]
    env = [_env("POD_NAME", field="metadata.name"), _env("POD_NAMESPACE", field="metadata.namespace"),
           _env("POD_IP", "$(POD_NAME).$(POD_NAMESPACE)")]
    return flags, env


def manifest(name: str, bench: registry.Benchmark, script_args: list[str], shape: dict, pod: dict,
             namespace: str | None = None) -> dict:
    """One PaddleJob. shape: {"mode", "nodes", "per_node"} (collective) or {"mode", "servers",
    "workers"} (ps); pod: {"image", "workdir", "cpu", "memory", "gpus", "timeout"}."""
    launcher = ["python", "-m", "paddle.distributed.launch", "--log_dir", POD_LOGS]
    args = [bench.script, *script_args, "--results", POD_RESULTS]
    if shape["mode"] == "collective":
        types = {"Worker": shape["nodes"]}
        pod_names = [f"{name}-worker-{i}" for i in range(shape["nodes"])]
        launcher += ["--nproc_per_node", str(shape["per_node"])]
        env, procs = [_env("POD_IP", field="status.podIP"),
                      _env("PADDLE_RANK", field=f"metadata.labels['{INDEX_LABEL}']")], shape["per_node"]
    else:
        types = {"Master": shape["servers"], "Worker": shape["workers"]}
        # trainer 0 is the record's first host: the trainers in rank order, then the servers
        pod_names = [f"{name}-worker-{i}" for i in range(shape["workers"])] + \
                    [f"{name}-master-{i}" for i in range(shape["servers"])]
        flags, env = ps_launch(name, shape)
        launcher, procs = launcher + flags, 1
    said = contract.RankContract(nodes=len(pod_names), launch={"executor": "kubernetes", "hosts": pod_names})
    env += [_env(k, v) for k, v in said.to_env().items()] + [_env("PORT_RANGE", LAUNCHER_PORT_RANGE)]
    if pod.get("cpu"):  # the pod sees the machine's cores, not its limit: share the limit instead
        threads = contract.RankContract(threads=str(max(1, int(quantity(pod["cpu"])) // procs)))
        env += [_env(k, v) for k, v in threads.to_env().items()]
    env += [_env(k, v) for k, v in pod.get("env", ())]
    gpus = shape.get("per_node") if pod.get("gpus") else None
    cont = container(pod["image"], pod["workdir"], [], env,
                     _resources(pod.get("cpu"), pod.get("memory"), gpus, pod.get("rdma")), bool(pod.get("rdma")))
    meta = {"name": name, "labels": {"app.kubernetes.io/created-by": "fleetbench",
                                      "fleetbench/benchmark": bench.name}}
    if namespace:
        meta["namespace"] = namespace
    run_policy = {"cleanPodPolicy": "None", "backoffLimit": 0,
                  "activeDeadlineSeconds": int(pod.get("timeout") or DEFAULT_TIMEOUT_S),
                  # all pods or none (a gang scheduler such as Volcano honours it; others ignore it)
                  "schedulingPolicy": {"minAvailable": sum(types.values())}}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
            "spec": {"runPolicy": run_policy,
                     "paddleReplicaSpecs": {t: replica(n, cont, launcher + args, bool(gpus))
                                            for t, n in types.items()}}}


def problems(doc: dict) -> list[str]:
    """What the training operator would refuse in a PaddleJob (the fields used here), or []."""
    out = []
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        out.append(f"apiVersion/kind: expected {API_VERSION} {KIND}")
    name = (doc.get("metadata") or {}).get("name") or ""
    if not DNS1035.fullmatch(name) or len(name) > 63:
        out.append(f"metadata.name {name!r}: expected a DNS-1035 label")
    specs = ((doc.get("spec") or {}).get("paddleReplicaSpecs")) or {}
    if not specs:
        out.append("spec.paddleReplicaSpecs: missing")
    for rtype, spec in specs.items():
        at = f"spec.paddleReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            out.append(f"{at}: replica type must be one of {', '.join(REPLICA_TYPES)}")
        if not isinstance(spec.get("replicas"), int) or spec["replicas"] < 1:
            out.append(f"{at}.replicas: expected an integer >= 1")
        if spec.get("restartPolicy") not in RESTART_POLICIES:
            out.append(f"{at}.restartPolicy: expected one of {', '.join(RESTART_POLICIES)}")
        conts = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        paddle = [c for c in conts if c.get("name") == CONTAINER]
        if not paddle or any(not c.get("image") for c in conts):
            out.append(f"{at}: expected a container named {CONTAINER!r}, every container with an image")
        elif not any(p.get("name") == PORT_NAME for p in paddle[0].get("ports", [])):
            out.append(f"{at}: the {CONTAINER} container needs a port named {PORT_NAME!r}")
    return out


# ----------------------------------------------------------------------------------------------
# From the command line or a sweep


def _shape(mode: str, nodes: int, per_node: str | int, servers_workers: str, where: str) -> dict:
    if mode == "collective":
        counts = hostlist.counts_for(nodes, hostlist.parse_per_node(per_node, where + "devices-per-node"))
        if len(set(counts)) > 1:
            raise K8sError(f"{where}devices per node {per_node}: a PaddleJob's workers share one pod "
                           f"template, so every pod runs the same number of processes")
        return {"mode": mode, "nodes": nodes, "per_node": counts[0]}
    try:
        servers, workers = (int(x) for x in str(servers_workers).split("/"))
    except ValueError:
        raise K8sError(f"{where}servers/workers {servers_workers!r}: expected SERVERS/WORKERS like 2/2") from None
    if servers < 1 or workers < 1:
        raise K8sError(f"{where}servers/workers {servers_workers!r}: expected at least 1 of each")
    return {"mode": mode, "servers": servers, "workers": workers}


def from_sweep(path: str, pod: dict, namespace: str | None) -> list[dict]:
    """One PaddleJob per cell and repeat of a sweep file."""
    from fleetbench.sweep import sweepfile

    docs = []
    try:
        cells = sweepfile.expand(sweepfile.load_spec(path), path, on_hosts=True)
    except sweepfile.SweepError as e:
        raise K8sError(str(e)) from None
    for i, cell in enumerate(cells, start=1):
        where = f"{path}: cell {i} ({cell.label()}): "
        if cell.network:
            raise K8sError(f"{where}network {cell.network!r} is an emulated link; on Kubernetes the links are "
                           f"the cluster's (drop `network:` from the sweep)")
        shape = _shape("ps" if cell.mode == "ps" else "collective", cell.nodes, cell.devices_per_node, f"{cell.servers}/{cell.workers}", where)
        # the cell's own script: a model trained both ways has one per family (resnet18 ps is not
        # collective/resnet18.py, which the benchmark's name alone gives)
        bench = dataclasses.replace(registry.get(cell.benchmark),
                                    script=os.path.relpath(cell.script, registry.REPO_ROOT))
        args = ["--preset", cell.preset] + [x for s in cell.sets for x in ("--set", s)]
        check_config(bench, args, where)
        for r in range(1, cell.repeats + 1):
            name = job_name("fb", bench.name, cell.preset, f"c{i}", f"r{r}")
            doc = manifest(name, bench, args, shape, dict(pod, timeout=cell.timeout), namespace)
            queue(doc, len(docs) + 1)
            docs.append(doc)
    return docs


def queue(doc: dict, position: int) -> None:
    """A sweep's jobs are created suspended and released one at a time, in `fleetbench/order`, by the
    loop in docs/guide/clusters.md: cells never run against each other (runPolicy.suspend, operator >= 1.6)."""
    doc["spec"]["runPolicy"]["suspend"] = True
    doc["metadata"]["labels"]["fleetbench/order"] = f"{position:04d}"


def check_config(bench: registry.Benchmark, script_args: list[str], where: str) -> None:
    """The benchmark's own --check of its preset and --set keys, before anything is written."""
    problem = _check_problem(str(bench.path), tuple(script_args))
    if problem is None:
        return
    # What the manifest says (its preset and --set keys) is refused here; anything else, such as
    # a data directory this machine lacks, is the image's business and only said
    if re.search(r"(^|: )--(preset|set)\b", problem):
        raise K8sError(f"{where}{problem}")
    print(f"fleetbench k8s: note: {where}{problem} (here; the pod's image may differ)", file=sys.stderr)


@functools.lru_cache(maxsize=None)
def _check_problem(script: str, script_args: tuple) -> str | None:
    """The script's --check refusal, or None. Cached: a sweep's cells repeat a few (script, preset,
    --set) choices, and each check starts a Python with Paddle (seconds)."""
    from fleetbench.job import preflight  # imports Paddle: only when manifests are really built

    try:
        preflight.check_config(script, list(script_args), dict(os.environ))
    except preflight.LaunchError as e:
        return str(e)
    return None


def gloo_race_note(doc: dict) -> str | None:
    """A note for a CPU collective job of two or more pods with two or more ranks each: Paddle
    2.6.2's gloo groups rendezvous on bare keys and race there (11 of 12 such jobs failed in the
    emulator; 3.3.1 passed every one), and a PaddleJob does not retry (docs/guide/clusters.md)."""
    specs = doc["spec"]["paddleReplicaSpecs"]
    if "Master" in specs or specs["Worker"]["replicas"] < 2:
        return None
    cont = specs["Worker"]["template"]["spec"]["containers"][0]
    command = cont["command"] + cont["args"]
    per_node = int(command[command.index("--nproc_per_node") + 1])
    if per_node < 2 or "nvidia.com/gpu" in cont.get("resources", {}).get("limits", {}):
        return None
    return (f"{doc['metadata']['name']}: {per_node} CPU ranks a pod: use a Paddle 3.x image (2.6.2's gloo "
            f"group rendezvous races with several ranks a pod; docs/guide/clusters.md)")


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench k8s", description="Write Kubeflow PaddleJob manifests.")
    p.add_argument("what", type=WHAT, help="a benchmark name (resnet50, ctr, ...) or a sweep file (.yaml)")
    p.add_argument("--image", required=True, type=IMAGE, help="container image with Paddle and this repository")
    p.add_argument("--workdir", default="/fleetbench", type=cmdline.TEXT, help="the repository's directory in the image")
    p.add_argument("--preset", default="full", type=cmdline.TEXT)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=config.SETTING,
                   help="config override (repeatable)")
    p.add_argument("--nodes", type=cmdline.COUNT, default=1, help="collective: worker pods (default 1)")
    p.add_argument("--devices-per-node", default="1", type=PER_NODE, help="collective: processes (GPUs) per pod")
    p.add_argument("--servers-workers", default="1/1", type=SERVERS_WORKERS, help="parameter server: SERVERS/WORKERS pods")
    p.add_argument("--gpus", action="store_true", help="request devices-per-node nvidia.com/gpu per pod")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable of every pod, e.g. NCCL_IB_HCA=mlx5 (repeatable)")
    p.add_argument("--rdma", metavar="RESOURCE[=N]",
                   help="the RDMA device plugin's resource per pod (e.g. rdma/hca_shared_devices_a=1), with IPC_LOCK")
    p.add_argument("--cpu", type=CPU, help="CPU request and limit per pod (e.g. 8, 500m)")
    p.add_argument("--memory", type=MEMORY, help="memory request and limit per pod (e.g. 32Gi)")
    p.add_argument("--timeout", type=cmdline.SECONDS, default=DEFAULT_TIMEOUT_S,
                   help="seconds before the job is stopped (runPolicy.activeDeadlineSeconds; sweeps: each cell's)")
    p.add_argument("--name", type=JOB_NAME, help="job name (default from benchmark, preset and shape)")
    p.add_argument("--namespace", type=NAMESPACE)
    p.add_argument("--out", type=cmdline.OUTPUT_FILE, help="write here (default: stdout)")
    return p


def build(args: argparse.Namespace) -> list[dict]:
    pod = {"image": args.image, "workdir": args.workdir, "cpu": args.cpu, "memory": args.memory, "gpus": args.gpus,
           "timeout": args.timeout, "env": user_env(args.env), "rdma": rdma_resource(args.rdma)}
    if args.what.endswith((".yaml", ".yml")):
        return from_sweep(args.what, pod, args.namespace)
    try:
        bench = registry.get(args.what)
    except registry.UnknownBenchmark as e:
        raise K8sError(f"{e}; or give a sweep file (.yaml)") from None
    shape = _shape(bench.family if bench.family == "ps" else "collective", args.nodes, args.devices_per_node,
                   args.servers_workers, "--")
    size = f"{args.nodes}x{shape['per_node']}" if shape["mode"] == "collective" else args.servers_workers
    name = args.name or job_name("fb", bench.name, args.preset, size)
    script_args = ["--preset", args.preset] + [x for s in args.set for x in ("--set", s)]
    try:
        config.preset_overrides(bench.name, args.preset)  # read here; --set keys need the script (Paddle)
    except config.ConfigError as e:
        raise K8sError(str(e)) from None
    check_config(bench, script_args, "--preset/--set: ")
    return [manifest(name, bench, script_args, shape, pod, args.namespace)]


@cmdline.refusing("fleetbench k8s")
def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    docs = build(args)
    for doc in docs:
        bad = problems(doc)
        if bad:
            raise K8sError(f"{doc['metadata']['name']}: {bad[0]}")
    for note in filter(None, map(gloo_race_note, docs)):
        print(f"fleetbench k8s: note: {note}", file=sys.stderr)
    text = yaml.safe_dump_all(docs, sort_keys=False, width=1000)
    if args.out:  # checked by its parser before anything was built
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
        print(f"fleetbench k8s: {len(docs)} PaddleJob(s) in {args.out}; kubectl apply -f {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
