"""An emulated training operator: the pods of a generated PaddleJob run on this machine with the
environment kubeflow/training-operator v1.9.0 gives them (pkg/controller.v1/paddlepaddle/envvar.go:
PYTHONUNBUFFERED, PADDLE_JOB_ID, PADDLE_NNODES, PADDLE_MASTER = master-0 (PS) or worker-0
(collective) on the `master` port, PADDLE_SERVER_NUM=1 on Masters, PADDLE_TRAINER_NUM=1 on
Workers), the pod's Service names resolved as cluster DNS would, each pod in a process group of
its own, under a hard timeout, everything killed at the end. Each pod gets an address: by default
its own 127.0.0.x on this machine's loopback (enough for a parameter-server job, whose endpoints
are explicit); `places` puts each pod in a node of the emulated cluster instead (its own network
namespace, address and interface), which a collective job's gloo rendezvous needs: on one
loopback every pod would advertise the same interface. Used by tests/job/test_k8s_operator.py and
tests/root/test_k8s_collective.py."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from fleetbench.engines import k8s

HARD_TIMEOUT_S = 420  # a tiny job on a loaded 2-core machine; the job must end by itself well before


def pods_of(doc: dict) -> list[tuple[str, int, dict]]:
    return [(rtype, i, spec) for rtype, spec in doc["spec"]["paddleReplicaSpecs"].items()
            for i in range(spec["replicas"])]


def operator_env(doc: dict, rtype: str, index: int, ip_of: dict) -> dict:
    """envvar.go's setPodEnv for one pod (the fieldRefs resolved as the kubelet would)."""
    name, specs = doc["metadata"]["name"], doc["spec"]["paddleReplicaSpecs"]
    ps = "Master" in specs
    env = {"PYTHONUNBUFFERED": "0", "PADDLE_JOB_ID": name,
           "PADDLE_NNODES": str(sum(s["replicas"] for s in specs.values())),
           "PADDLE_MASTER": f"{ip_of[name + ('-master-0' if ps else '-worker-0')]}:{k8s.PORT}"}
    if ps:
        env["PADDLE_SERVER_NUM" if rtype == "Master" else "PADDLE_TRAINER_NUM"] = "1"
    return env


def pod_env(doc: dict, rtype: str, index: int, ip_of: dict, ifname: str = "lo") -> dict:
    pod = f"{doc['metadata']['name']}-{rtype.lower()}-{index}"
    fields = {"status.podIP": ip_of[pod], "metadata.name": pod, "metadata.namespace": "default",
              f"metadata.labels['{k8s.INDEX_LABEL}']": str(index)}
    # a pod starts with the image's environment, not this test's: no rank, job or thread settings
    # (importing fleetbench set OMP_NUM_THREADS in this process; a pod's ranks choose their own)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE", "FLEETBENCH", "POD_")) and k != "OMP_NUM_THREADS"}
    cont = doc["spec"]["paddleReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]
    for e in cont["env"]:  # Kubernetes order: the template's env, then the operator's
        env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    env["POD_IP"] = ip_of[pod] if "$(" in env["POD_IP"] else env["POD_IP"]  # cluster DNS: the name is this IP
    env.update(operator_env(doc, rtype, index, ip_of))
    env["GLOO_SOCKET_IFNAME"] = ifname  # the pod's interface (gloo, the CPU stand-in for NCCL, binds to it)
    return env


def run_job(doc: dict, where: Path, places: list | None = None, python: str = sys.executable) -> dict:
    """Runs every pod; {pod: (exit code, stdout text, log dir)}. `places`: one (ip, argv prefix,
    interface) per pod in replica order, e.g. an emulated node's (ip, ["ip", "netns", "exec",
    netns], ifname); None: 127.0.0.2, .3, ... on this machine's loopback. `python`: the image's
    interpreter, and so its Paddle build (the `python` of the container's command)."""
    name = doc["metadata"]["name"]
    pods = [f"{name}-{r.lower()}-{i}" for r, i, _ in pods_of(doc)]
    places = places or [(f"127.0.0.{n}", [], "lo") for n in range(2, len(pods) + 2)]
    ip_of = {pod: place[0] for pod, place in zip(pods, places)}
    wrap = {pod: place[1] for pod, place in zip(pods, places)}
    ifname = {pod: place[2] for pod, place in zip(pods, places)}
    dns = lambda a: re.sub(r"([a-z0-9-]+)\.\$\(POD_NAMESPACE\)", lambda m: ip_of[m.group(1)], a)  # noqa: E731
    started = {}
    for rtype, i, spec in pods_of(doc):
        pod = f"{name}-{rtype.lower()}-{i}"
        (where / pod).mkdir()
        cont = spec["template"]["spec"]["containers"][0]
        argv = [python] + [dns(a).replace(k8s.POD_LOGS, str(where / pod / "log"))
                                   .replace(k8s.POD_RESULTS, str(where / pod / "r.jsonl"))
                                   for a in cont["command"][1:] + cont["args"]]
        out = open(where / pod / "stdout", "w")
        started[pod] = subprocess.Popen(wrap[pod] + argv, env=pod_env(doc, rtype, i, ip_of, ifname[pod]), stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True, cwd=k8s_repo())
    codes = {}
    try:
        for pod, p in started.items():
            codes[pod] = p.wait(timeout=HARD_TIMEOUT_S)
    finally:
        for p in started.values():  # one process group per pod: whatever is left goes
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return {pod: (codes[pod], (where / pod / "stdout").read_text(), where / pod / "log") for pod in started}


def k8s_repo() -> str:
    from fleetbench.measure import registry
    return str(registry.REPO_ROOT)


def import_logs(logs: list[Path], store: Path) -> list[dict]:
    subprocess.run([sys.executable, "-m", "fleetbench", "results", "import", "--results", str(store),
                    *map(str, logs)], check=True, capture_output=True, cwd=k8s_repo())
    return [json.loads(line) for line in store.read_text().splitlines() if line.strip()]


def generate(tmp_path: Path, *args) -> dict:
    out = tmp_path / "job.yaml"
    assert k8s.cli([*args, "--image", "img", "--timeout", "300", "--out", str(out)]) == 0
    (doc,) = yaml.safe_load_all(out.read_text())
    return doc
