"""issue 26 finding 7: a failure record's world size is what Paddle's launcher starts. With neither
--gpus/--devices nor --nproc_per_node, Paddle starts one rank per device it sees (one per GPU on a
GPU node), not one. Checked against Paddle's own pod_replicas and Device, on constructed nodes."""
import types

import pytest
from paddle.distributed.launch.context.device import Device, DeviceType
from paddle.distributed.launch.controllers.controller import Controller

from fleetbench.hosts import launch
from fleetbench.job import preflight

EIGHT_GPUS = {"type": "gpu", "labels": [str(i) for i in range(8)]}
CPU = {"type": "cpu", "labels": []}


def paddles_count(nproc, devices, found) -> int:
    """Paddle's own Controller.pod_replicas over a node whose Device is `found`."""
    device = Device(dtype=found["type"])
    device.labels = found["labels"]
    ctx = types.SimpleNamespace(args=types.SimpleNamespace(nproc_per_node=nproc, devices=devices),
                                node=types.SimpleNamespace(device=device))
    return Controller.pod_replicas(types.SimpleNamespace(ctx=ctx))


@pytest.mark.parametrize("nproc, devices, found", [
    (None, None, EIGHT_GPUS), (None, None, CPU), (2, None, EIGHT_GPUS), (None, "0,1,2", EIGHT_GPUS),
    (None, None, {"type": "gpu", "labels": ["3", "5"]}),  # CUDA_VISIBLE_DEVICES=3,5
    (None, None, {"type": DeviceType.GPU, "labels": [""]}),  # CUDA_VISIBLE_DEVICES="": Paddle counts 1
])
def test_ranks_per_node_is_paddles_pod_replicas(nproc, devices, found):
    ours = preflight.ranks_per_node(str(nproc) if nproc else None, devices, {}, found)
    assert ours == paddles_count(nproc, devices, found)


def test_the_environment_overrides_the_flags_as_in_paddles_launcher():
    assert preflight.ranks_per_node("2", None, {"PADDLE_NPROC_PER_NODE": "4"}, EIGHT_GPUS) == 4
    assert preflight.ranks_per_node(None, None, {"PADDLE_DEVICES": "0,1"}, EIGHT_GPUS) == 2
    assert preflight.ranks_per_node(None, None, {}, None) == 1  # the probe could not tell


def test_a_failure_record_on_an_eight_gpu_node_says_world_size_eight():
    args = launch.parse_argv(["collective/resnet50.py"])
    assert launch.job_shape(args, {}, EIGHT_GPUS) == ("collective", 1, 8, 8)
    assert launch.job_shape(launch.parse_argv(["--nnodes", "2", "s.py"]), {}, EIGHT_GPUS) == ("collective", 2, 8, 16)
    assert launch.job_shape(args, {}, CPU) == ("collective", 1, 1, 1)
    identity = launch.identity_for(args, shape=launch.job_shape(args, {}, EIGHT_GPUS))
    assert (identity.world_size, identity.devices_per_node) == (8, 8)


def test_the_probe_reads_cuda_visible_devices_as_paddles_launcher_does():
    """Paddle's parse_device, run for real: CUDA_VISIBLE_DEVICES names the devices it counts, even
    on this CPU build; without it a CPU build sees no device (one rank)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    found = preflight.visible_devices({**env, "CUDA_VISIBLE_DEVICES": "0,1,2"})
    assert found["labels"] == ["0", "1", "2"]
    assert preflight.ranks_per_node(None, None, {}, found) == 3
    args = launch.parse_argv(["s.py"])
    assert launch.seen(launch.parse_argv(["--nproc_per_node", "2", "s.py"]), env) is None  # no probe needed
    import paddle

    gpus = paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0
    assert launch.job_shape(args, env, launch.seen(args, env))[3] == max(1, gpus)  # one rank per GPU


def paddles_devices_per_rank(nproc, devices, found) -> list | None:
    """What Paddle's collective controller hands each rank (controllers/collective.py: one rank
    takes the whole selected list, else rank i takes entry i); None where it fails (IndexError)."""
    device = Device(dtype=found["type"])
    device.labels = found["labels"]
    selected = device.get_selected_devices(devices)
    replicas = paddles_count(nproc, devices, found)
    if not selected:
        return [[] for _ in range(replicas)]
    if replicas == 1:
        return [selected]
    return [[selected[i]] for i in range(replicas)] if replicas <= len(selected) else None


@pytest.mark.parametrize("nproc, devices, found", [
    (None, "0,1,2,3,4,5,6,7", EIGHT_GPUS), (8, "0,1,2,3,4,5,6,7", EIGHT_GPUS), (4, "0,1,2,3,4,5,6,7", EIGHT_GPUS),
    (1, "0,1,2,3,4,5,6,7", EIGHT_GPUS), (9, "0,1,2,3,4,5,6,7", EIGHT_GPUS), (16, None, EIGHT_GPUS),
    (8, None, EIGHT_GPUS), (2, None, EIGHT_GPUS), (4, None, CPU), (None, None, EIGHT_GPUS),
    (3, None, {"type": "gpu", "labels": ["4", "6"]}),
])
def test_a_rank_count_is_refused_exactly_where_paddle_would_not_give_each_rank_one_device(nproc, devices, found):
    # acceptance 4 of issue 33: --nproc_per_node against the devices Paddle's launcher hands out
    handed = paddles_devices_per_rank(nproc, devices, found)
    listed = len(devices.split(",")) if devices else len(found["labels"])
    one_each = handed is not None and all(len(d) == (1 if found["type"] == "gpu" else 0) for d in handed) and (
        not devices or len(handed) == listed)
    problem = preflight.count_problem(str(nproc) if nproc else None, "--gpus", devices, found)
    assert (problem is None) == one_each, (problem, handed)
