"""The epoch schedule's pure parts (fleetbench/train/epochs.py): the per-epoch figures over ranks,
the log lines, the convergence metrics, the warm-up check. The training loop itself runs in
tests/unit/test_mnist.py's job-marked tests."""
import time
import types

import pytest

from fleetbench.measure import config
from fleetbench.train import epochs, loop


class TwoRanks:
    """The reductions of a 2-rank job as every rank sees them (fleetbench.train.loop's comm does
    the same over gloo): each max/sum call meets the other rank's next reported values."""

    def __init__(self, maxes, sums):
        self.maxes, self.sums = list(maxes), list(sums)

    def max(self, values):
        return [max(a, b) for a, b in zip(values, self.maxes.pop(0))]

    def sum(self, values):
        return [a + b for a, b in zip(values, self.sums.pop(0))]


def test_epoch_figures_take_the_slowest_rank_and_global_units_and_loss():
    mine = {"time_s": 2.0, "units": 100.0, "loss_sum": 3.0, "steps": 3}
    # the other rank: epoch time 4 s; 60 units, loss sum 5 over 5 steps; started long ago
    comm = TwoRanks(maxes=[[4.0], [1e9, 2e9]], sums=[[60.0, 5.0, 5]])
    evaluation = {"test_time_s": 0.5, "test_accuracy": 0.9, "test_loss": 0.3, "test_top5": None}
    clock = loop.RunClock(init_start_ms=0.0, init_s=0.0, run_start=time.perf_counter(), run_start_ms=0.0)
    figures = epochs._epoch_figures(1, mine, evaluation, time.perf_counter(), clock, comm)
    assert figures["epoch_time_s"] == 4.0
    assert figures["throughput"] == pytest.approx(160.0 / 4.0)  # global units / slowest rank's time
    assert figures["train_loss"] == pytest.approx(8.0 / 8)  # mean over every step of every rank
    assert figures["elapsed_s"] == 1e9  # the job's clock is its slowest rank's
    assert figures["run_elapsed_s"] == 2e9  # and so is MLPerf's, from run_start
    assert figures["test_time_s"] == 0.5 and "test_time_s" not in evaluation
    assert figures["test_accuracy"] == 0.9 and figures["epoch"] == 1


def _figures(epoch, accuracy, elapsed, top5=None):
    return {"epoch": epoch, "epoch_time_s": 1.234, "test_time_s": 0.5, "test_accuracy": accuracy,
            "test_loss": 0.25, "test_top5": top5, "train_loss": 0.5, "throughput": 123.45, "elapsed_s": elapsed}


def test_epoch_lines_are_the_hand_made_layout_then_fleetbenchs():
    hand, ours = epochs.epoch_lines(_figures(2, 0.912, 3.5)).split("\n")
    assert hand == "Epoch 2 in 1.23 sec, test time 0.50 sec, test accuracy: 0.9120"
    assert ours == "epoch 2 test_loss 0.2500 train_loss 0.5000 ips 123.5 elapsed_s 3.50"
    assert " test_top5 0.9900 " in epochs.epoch_lines(_figures(2, 0.912, 3.5, top5=0.99))


def test_convergence_metrics_find_the_first_epoch_at_target():
    runs = [_figures(1, 0.80, 10.0), _figures(2, 0.95, 21.0), _figures(3, 0.97, 32.0, top5=0.99)]
    work = types.SimpleNamespace(lr=0.1, batches=[0] * 7)
    cfg = types.SimpleNamespace(target_accuracy=0.95, seed=3)
    got = epochs.convergence_metrics(cfg, work, runs)
    assert (got["time_to_target_s"], got["epochs_to_target"]) == (21.0, 2)
    assert got["final_test_accuracy"] == 0.97 and got["final_test_top5"] == 0.99
    assert got["steps_per_epoch"] == 7 and got["lr_effective"] == 0.1 and got["epochs"] is runs
    assert got["seed"] == 3
    never = epochs.convergence_metrics(types.SimpleNamespace(target_accuracy=0.99, seed=3), work, runs)
    assert (never["time_to_target_s"], never["epochs_to_target"]) == (None, None)


def test_tally_starts_empty():
    tally = epochs.Tally(total_steps=10)
    assert (tally.step, tally.train_s, tally.measured, tally.loss_first) == (0, 0.0, [], None)
    assert epochs.Tally(total_steps=1).measured is not tally.measured


def test_warmup_must_end_inside_the_first_epoch():
    cfg = epochs.EpochConfig(warmup_steps=5)
    epochs.check_warmup(cfg, 6, "mnist")
    with pytest.raises(config.ConfigError, match=r"warmup_steps' must be < the 5 steps of an epoch \(mnist"):
        epochs.check_warmup(cfg, 5, "mnist")


@pytest.mark.parametrize("changes, key", [
    ({"epochs": 0}, "epochs"), ({"target_accuracy": 1.5}, "target_accuracy"),
    ({"stop_at_target": True}, "stop_at_target"), ({"eval_batch_size": 0}, "eval_batch_size")])
def test_epoch_config_refuses(changes, key):
    with pytest.raises(config.ConfigError, match=f"config key '{key}'"):
        epochs.EpochConfig(**changes).validate()
