"""PaddleJob manifests: each PS pod runs only its own role (by Paddle's own per-host filter of the
explicit endpoint lists, launch/controllers/ps.py), jobs end, bad presets stop before writing."""
import yaml

from fleetbench.engines import k8s


def _ps_docs(tmp_path, *extra):
    out = tmp_path / "job.yaml"
    assert k8s.cli(["ctr", "--image", "img", "--servers-workers", "2/4", "--out", str(out), *extra]) == 0
    return out, list(yaml.safe_load_all(out.read_text()))


def _flag(args, name):
    return args[args.index(name) + 1]


def test_ps_pods_run_only_their_role(tmp_path):
    _, (doc,) = _ps_docs(tmp_path)
    specs = doc["spec"]["paddleReplicaSpecs"]
    name = doc["metadata"]["name"]
    ran = {"servers": 0, "trainers": 0}
    for rtype, role in (("Master", "servers"), ("Worker", "trainers")):
        args = specs[rtype]["template"]["spec"]["containers"][0]["args"]
        for i in range(specs[rtype]["replicas"]):
            host = f"{name}-{rtype.lower()}-{i}.$(POD_NAMESPACE)"  # POD_IP as Kubernetes expands it
            mine = {r: [e for e in _flag(args, "--" + r).split(",") if e.startswith(host)]
                    for r in ("servers", "trainers")}
            assert len(mine[role]) == 1 and sum(len(v) for v in mine.values()) == 1, (rtype, i, mine)
            ran[role] += 1
    assert ran == {"servers": 2, "trainers": 4}


def test_jobs_end_and_carry_what_pods_need(tmp_path):
    out, (doc,) = _ps_docs(tmp_path, "--timeout", "120", "--gpus")
    assert doc["spec"]["runPolicy"]["activeDeadlineSeconds"] == 120
    assert "&id" not in out.read_text()  # no YAML anchors
    for spec in doc["spec"]["paddleReplicaSpecs"].values():
        tpl = spec["template"]
        assert tpl["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        env = {e["name"]: e.get("value") for e in tpl["spec"]["containers"][0]["env"]}
        assert env["PORT_RANGE"] == "20000:32000"


def test_gpu_pods_mount_shm(tmp_path):
    out = tmp_path / "c.yaml"
    assert k8s.cli(["resnet50", "--image", "img", "--nodes", "2", "--devices-per-node", "2", "--gpus",
                    "--preset", "tiny", "--out", str(out)]) == 0
    (doc,) = yaml.safe_load_all(out.read_text())
    pod = doc["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory"}


def test_bad_preset_or_key_exit_2_nothing_written(tmp_path, capsys):
    for bad in (["--preset", "nosuch"], ["--set", "bogus_key=1"]):
        out = tmp_path / "x.yaml"
        assert k8s.cli(["ctr", "--image", "img", "--out", str(out), *bad]) == 2
        assert not out.exists()
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fleetbench k8s: error:")
