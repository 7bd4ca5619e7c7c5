"""Each communication method does what its name says, observed in real 2-process gloo runs.

One launch of this file as a script (the probe, `__main__` below) trains tiny BERT with every
method on 2 ranks; one plain run does the same on 1 rank with the same global batch. The probe
records, per step: the all-reduce calls made from Python (paddle.distributed.all_reduce wrapped:
count, dtype, size) and markers around each step in the worker log, between which the C++
reducer's own log lines (GLOG_vmodule=reducer=3: "group [i] start fused_allreduce") count the
all-reduces it issues. Tests then compare schedules across methods and final parameters across
world sizes.
"""
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

METHODS = ("bsp", "wfbp", "mgwfbp", "grad_merge", "fp16_allreduce")
STEPS, K, PER_RANK_BATCH = 4, 2, 4
REDUCER_CALL = re.compile(r"group \[(\d+)\] start fused_allreduce")
MARK = re.compile(r"^PROBE (\w+) (\d+) (begin|hook|end)$")


# ---------------------------------------------------------------- the probe (runs under the launcher)
def probe(out_dir: Path, batch_size: int) -> None:
    import importlib.util

    import paddle
    import paddle.distributed as dist

    import fleetbench  # noqa: F401
    from fleetbench.measure import config
    from fleetbench.train import loop, methods

    path = Path(__file__).resolve().parents[2] / "collective/bert_large.py"
    spec = importlib.util.spec_from_file_location("bert_large", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    from paddle.distributed import stream

    calls = []
    real_all_reduce, real_all_gather = dist.all_reduce, stream.all_gather

    def counting(op, real):  # records (op, dtype, elements sent) of each Python collective call
        def call(*args, **kwargs):
            tensor = args[0] if op == "all_reduce" else args[1]
            calls.append((op, str(tensor.dtype).split(".")[-1], int(tensor.numel())))
            return real(*args, **kwargs)
        return call

    def mark(*words):
        print("PROBE", *words, file=sys.stderr, flush=True)

    def rank_spread(values):  # max - min across ranks, made outside the counted windows
        hi, lo = paddle.to_tensor(values), paddle.to_tensor(values)
        if ctx.world_size > 1:
            real_all_reduce(hi, op=dist.ReduceOp.MAX)
            real_all_reduce(lo, op=dist.ReduceOp.MIN)
        return float((hi - lo).abs().max())

    ctx, report = None, {}
    for method in METHODS:
        sets = [f"method={method}", "dropout=0", f"batch_size={batch_size}", f"grad_merge_steps={K}",
                f"warmup_steps={K}", f"steps={2 * K}"]
        cfg = config.build("bert_large", script.BertConfig, "tiny", sets)
        methods.check(cfg)
        ctx = ctx or loop.setup(cfg)
        paddle.seed(cfg.seed)
        work = script.build(cfg)
        model, step_fn = methods.prepare(cfg, work, ctx)
        synced, inner_step = [], work.optimizer.step

        def snapshot_then_step():  # the gradients the optimizer is given, i.e. after any all-reduce
            synced.append(paddle.concat([p.grad.reshape([-1]) for p in work.model.parameters()]).numpy())
            inner_step()

        work.optimizer.step = snapshot_then_step
        work.model.segment.weight.register_hook(lambda grad, m=method: mark(m, len(steps), "hook"))
        batches, steps = iter(work.batches), []
        for step in range(STEPS):
            batch = next(batches)
            mark(method, step, "begin")
            calls.clear()
            dist.all_reduce, stream.all_gather = (counting("all_reduce", real_all_reduce),
                                                  counting("all_gather", real_all_gather))
            loss = step_fn(batch)
            dist.all_reduce, stream.all_gather = real_all_reduce, real_all_gather
            mark(method, step, "end")
            grads = [p.grad.reshape([-1]) for p in work.model.parameters() if p.grad is not None]
            steps.append({"python_calls": list(calls), "loss": float(loss),
                          "pending_grad_spread": rank_spread(paddle.concat(grads)) if grads else None})
        flat = paddle.concat([p.reshape([-1]) for p in work.model.parameters()])
        report[method] = {"steps": steps, "tensors": len(work.model.parameters()),
                          "fp16_wire": ctx.runtime.get("fp16_wire"), "paddle": paddle.__version__,
                          "groups": len(model.group_indices) if hasattr(model, "group_indices") else None,
                          "param_spread": rank_spread(flat)}
        np.save(out_dir / f"params-{method}-w{ctx.world_size}-r{ctx.rank}.npy", flat.numpy())
        np.save(out_dir / f"grads-{method}-w{ctx.world_size}-r{ctx.rank}.npy", np.stack(synced))
    (out_dir / f"report-w{ctx.world_size}-r{ctx.rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    probe(Path(sys.argv[1]), int(sys.argv[2]))
    sys.exit(0)


# ---------------------------------------------------------------- the tests
import util  # noqa: E402  (tests/util.py; not needed by the probe)


def reducer_calls_per_step(log_text: str) -> dict:
    """{(method, step): reducer all-reduce group ids in issue order, with 'hook' markers inline}."""
    found, current = {}, None
    for line in log_text.splitlines():
        m = MARK.match(line.strip())
        if m and m[3] == "begin":
            current = (m[1], int(m[2]))
            found[current] = []
        elif m and m[3] == "end":
            current = None
        elif m and m[3] == "hook" and current:
            found[current].append("hook")
        elif current and REDUCER_CALL.search(line):
            found[current].append(int(REDUCER_CALL.search(line)[1]))
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("methods")
    two = util.fleetrun(out / "log", "--nproc_per_node", 2, Path(__file__), out, PER_RANK_BATCH, timeout=240,
                        GLOG_minloglevel=0, GLOG_vmodule="reducer=3",  # the reducer logs each all-reduce
                        **util.CPU_RANKS)  # gloo's float16 sum is what fp16_wire is tested against
    worker0 = out / "log/workerlog.0"
    assert two.returncode == 0, (two.stdout + two.stderr)[-3000:] + worker0.read_text()[-3000:]
    one = util.run_script(Path(__file__), out, 2 * PER_RANK_BATCH, timeout=240, **util.CPU_RANKS)
    assert one.returncode == 0, one.stderr[-3000:]
    reports = {name: json.loads((out / f"report-{name}.json").read_text())
               for name in ("w2-r0", "w2-r1", "w1-r0")}
    log = reducer_calls_per_step(worker0.read_text(errors="replace"))
    return out, reports, log


def reducer_counts(log, method):
    return [sum(1 for x in log[(method, s)] if x != "hook") for s in range(STEPS)]


def python_counts(report, method):
    return [len(s["python_calls"]) for s in report[method]["steps"]]


def test_bsp_all_reduces_once_after_backward_and_the_reducer_is_idle(runs):
    _, reports, log = runs
    r = reports["w2-r0"]
    assert reducer_counts(log, "bsp") == [0] * STEPS  # no_sync around forward+backward: reducer idle
    assert python_counts(r, "bsp") == [1] * STEPS  # one fused 128 MB bucket holds tiny BERT
    op, dtype, numel = r["bsp"]["steps"][0]["python_calls"][0]
    assert op == "all_reduce" and dtype == "float32" and numel == np.load(runs[0] / "params-bsp-w2-r0.npy").size  # every gradient


def test_wfbp_all_reduces_every_tensor_during_backward(runs):
    _, reports, log = runs
    r = reports["w2-r0"]["wfbp"]
    assert r["groups"] == r["tensors"] > 40
    assert reducer_counts(log, "wfbp") == [r["tensors"]] * STEPS
    assert python_counts(reports["w2-r0"], "wfbp") == [0] * STEPS
    # Overlap: most all-reduces are issued before the embedding's gradient exists (end of backward).
    order = log[("wfbp", 1)]
    assert order.index("hook") > r["tensors"] // 2


def test_mgwfbp_merges_tensors_into_fewer_buckets_than_wfbp(runs):
    _, reports, log = runs
    r = reports["w2-r0"]
    groups = r["mgwfbp"]["groups"]
    assert r["wfbp"]["groups"] > groups > 1
    assert reducer_counts(log, "mgwfbp") == [groups] * STEPS and python_counts(r, "mgwfbp") == [0] * STEPS
    assert log[("mgwfbp", 1)].index("hook") >= 1  # the first bucket left before backward ended


def test_grad_merge_all_reduces_once_per_k_micro_steps_and_accumulates_locally(runs):
    _, reports, log = runs
    r = reports["w2-r0"]["grad_merge"]
    groups = r["groups"]
    assert reducer_counts(log, "grad_merge") == [0, groups] * (STEPS // K)
    first, last = r["steps"][0], r["steps"][K - 1]
    assert first["pending_grad_spread"] > 1e-6  # after a no_sync micro-step each rank holds its own gradient
    assert last["pending_grad_spread"] == 0.0  # the synced micro-step all-reduced, stepped, cleared


def test_fp16_allreduce_sends_half_precision(runs):
    _, reports, log = runs
    r = reports["w2-r0"]
    assert reducer_counts(log, "fp16_allreduce") == [0] * STEPS
    fp16 = [c for s in r["fp16_allreduce"]["steps"] for c in s["python_calls"]]
    fp32 = [c for s in r["bsp"]["steps"] for c in s["python_calls"]]
    wire = r["fp16_allreduce"]["fp16_wire"]  # the path the backend probe chose, as the record says
    assert [(op, dtype) for op, dtype, _ in fp16] == [(wire, "float16")] * STEPS
    assert [n for _, _, n in fp16] == [n for _, _, n in fp32]  # every gradient, one bucket


def test_fp16_wire_is_the_float16_sum_where_the_backend_sums_it_right(runs):
    """Gloo sums float16 right on Paddle 2.6.2 and returns inf on 3.x (measured on 3.0.0 and
    3.3.1); the one-time probe must find that, so 3.x gathers and 2.6.2 keeps the sum."""
    _, reports, _ = runs
    r = reports["w2-r0"]["fp16_allreduce"]
    assert r["fp16_wire"] == ("all_reduce" if r["paddle"].startswith("2.") else "all_gather")
    assert reports["w1-r0"]["fp16_allreduce"]["fp16_wire"] is None  # one process sends nothing


@pytest.mark.parametrize("method", METHODS)
def test_two_ranks_match_one_rank_with_the_same_global_batch(runs, method):
    """Gradients are averaged correctly: 2 ranks x B give what 1 rank x 2B gives, step by step.

    Compared: the gradients handed to the optimizer at every optimizer step, and the losses. Final
    parameters are not compared across world sizes: Adam turns rounding-level differences in
    near-zero gradients into lr-sized steps (seen: 1e-9 gradient noise -> 1e-3 parameter change).
    """
    out, reports, _ = runs
    two = [np.load(out / f"grads-{method}-w2-r{r}.npy") for r in (0, 1)]
    one = np.load(out / f"grads-{method}-w1-r0.npy")
    assert len(one) == (STEPS // K if method == "grad_merge" else STEPS) == len(two[0])
    np.testing.assert_array_equal(two[0], two[1])  # the ranks were given the same gradients ...
    assert reports["w2-r0"][method]["param_spread"] == 0.0  # ... and hold the same parameters
    rel = 4e-3 if method == "fp16_allreduce" else 1e-4  # float16 on the wire: 11-bit mantissa
    for step, (a, b) in enumerate(zip(two[0], one)):
        assert np.abs(a - b).max() <= rel * np.abs(b).max(), f"optimizer step {step}"
    mean2 = [(a["loss"] + b["loss"]) / 2 for a, b in zip(reports["w2-r0"][method]["steps"],
                                                         reports["w2-r1"][method]["steps"])]
    np.testing.assert_allclose(mean2, [s["loss"] for s in reports["w1-r0"][method]["steps"]], rtol=1e-4)


@pytest.mark.parametrize("changes, expected", [
    (dict(method="horovod"), "config key 'method' must be one of bsp, wfbp, mgwfbp, grad_merge, fp16_allreduce"),
    (dict(method="grad_merge", grad_merge_steps=4, warmup_steps=2), "'warmup_steps' must be a multiple of"),
    (dict(method="grad_merge", grad_merge_steps=4, steps=10), "'steps' must be a multiple of grad_merge_steps"),
    (dict(method="fp16_allreduce", amp="fp16"), "cannot be combined with method=fp16_allreduce"),
])
def test_bad_method_settings_are_one_line_config_errors(changes, expected):
    from fleetbench.measure import config
    from fleetbench.train import methods

    cfg = config.CollectiveConfig(warmup_steps=4, steps=12)
    for key, value in changes.items():
        setattr(cfg, key, value)
    with pytest.raises(config.ConfigError, match=expected):
        methods.check(cfg)
