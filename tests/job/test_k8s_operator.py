"""An emulated training operator: the pods of a generated PaddleJob run on this machine with the
environment kubeflow/training-operator v1.9.0 gives them (pkg/controller.v1/paddlepaddle/envvar.go:
PYTHONUNBUFFERED, PADDLE_JOB_ID, PADDLE_NNODES, PADDLE_MASTER = master-0 (PS) or worker-0
(collective) on the `master` port, PADDLE_SERVER_NUM=1 on Masters, PADDLE_TRAINER_NUM=1 on
Workers), each pod at its own 127.0.0.x (the pod's Service name resolved as cluster DNS would),
in a process group of its own, under a hard timeout, everything killed at the end. What it shows:
which roles start in which pod, that the job ends, and where the record lands."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import util

from fleetbench.engines import k8s

pytestmark = [pytest.mark.job, *util.NEEDS_PS]  # its one job is a parameter-server job (Paddle 2.6.2)
HARD_TIMEOUT_S = 420  # a tiny job on a loaded 2-core machine; the job must end by itself well before


def _pods(doc: dict) -> list[tuple[str, int, dict]]:
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


def pod_env(doc: dict, rtype: str, index: int, ip_of: dict) -> dict:
    pod = f"{doc['metadata']['name']}-{rtype.lower()}-{index}"
    fields = {"status.podIP": ip_of[pod], "metadata.name": pod, "metadata.namespace": "default",
              f"metadata.labels['{k8s.INDEX_LABEL}']": str(index)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE", "FLEETBENCH", "POD_"))}
    cont = doc["spec"]["paddleReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]
    for e in cont["env"]:  # Kubernetes order: the template's env, then the operator's
        env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    env["POD_IP"] = ip_of[pod] if "$(" in env["POD_IP"] else env["POD_IP"]  # cluster DNS: the name is this IP
    env.update(operator_env(doc, rtype, index, ip_of))
    env["GLOO_SOCKET_IFNAME"] = "lo"  # CPU stand-in for NCCL: every emulated pod shares this machine's loopback
    return env


def run_job(doc: dict, where: Path) -> dict:
    """Runs every pod; {pod: (exit code, stdout text, log dir)}."""
    name = doc["metadata"]["name"]
    ip_of = {f"{name}-{r.lower()}-{i}": f"127.0.0.{n}" for n, (r, i, _) in enumerate(_pods(doc), start=2)}
    dns = lambda a: re.sub(r"([a-z0-9-]+)\.\$\(POD_NAMESPACE\)", lambda m: ip_of[m.group(1)], a)  # noqa: E731
    started = {}
    for rtype, i, spec in _pods(doc):
        pod = f"{name}-{rtype.lower()}-{i}"
        (where / pod).mkdir()
        cont = spec["template"]["spec"]["containers"][0]
        argv = [sys.executable] + [dns(a).replace(k8s.POD_LOGS, str(where / pod / "log"))
                                   .replace(k8s.POD_RESULTS, str(where / pod / "r.jsonl"))
                                   for a in cont["command"][1:] + cont["args"]]
        out = open(where / pod / "stdout", "w")
        started[pod] = subprocess.Popen(argv, env=pod_env(doc, rtype, i, ip_of), stdout=out,
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


def _import(logs: list[Path], store: Path) -> list[dict]:
    subprocess.run([sys.executable, "-m", "fleetbench", "results", "import", "--results", str(store),
                    *map(str, logs)], check=True, capture_output=True, cwd=k8s_repo())
    return [json.loads(line) for line in store.read_text().splitlines() if line.strip()]


def _generate(tmp_path: Path, *args) -> dict:
    out = tmp_path / "job.yaml"
    assert k8s.cli([*args, "--image", "img", "--timeout", "300", "--out", str(out)]) == 0
    (doc,) = yaml.safe_load_all(out.read_text())
    return doc


def test_ps_job_runs_2_servers_and_4_trainers_and_brings_one_record_back(tmp_path):
    doc = _generate(tmp_path, "ctr", "--preset", "tiny", "--servers-workers", "2/4")
    pods = run_job(doc, tmp_path)
    assert all(code == 0 for code, _, _ in pods.values()), {p: c for p, (c, _, _) in pods.items()}
    logs = {p: sorted(x.name for x in d.iterdir() if x.name.startswith(("serverlog", "workerlog")))
            for p, (_, _, d) in pods.items()}
    assert sum(x.startswith("serverlog") for v in logs.values() for x in v) == 2, logs
    assert sum(x.startswith("workerlog") for v in logs.values() for x in v) == 4, logs
    assert all(v == ["serverlog.0"] for p, v in logs.items() if "-master-" in p), logs
    assert all(v == ["workerlog.0"] for p, v in logs.items() if "-worker-" in p), logs
    with_record = [p for p, (_, out, _) in pods.items() if "FLEETBENCH_RESULT" in out]
    assert with_record == [f"{doc['metadata']['name']}-worker-0"]
    records = _import([tmp_path / p / "stdout" for p in pods], tmp_path / "store.jsonl")
    assert len(records) == 1
    runtime = records[0]["config"]["runtime"]
    assert (runtime["servers"], runtime["workers"]) == (2, 4)
