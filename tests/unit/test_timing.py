"""Timing rules on a fake clock: warm-up excluded, windows synced at their edges, repeat statistics."""
import pytest

from fleetbench.measure.timing import WindowTimer, log_line, summarize


class FakeClock:
    def __init__(self):
        self.now, self.syncs = 0.0, 0

    def __call__(self):
        return self.now

    def sync(self):
        self.syncs += 1


def test_measured_window_starts_after_warmup_and_excludes_its_reader_time():
    clock = FakeClock()
    timer = WindowTimer(warmup_steps=2, sync=clock.sync, clock=clock)
    barriers = []
    for step in range(1, 7):
        clock.now += 10.0 if step <= 2 else 1.0  # slow warm-up steps must not count
        timer.step_done(step, samples=4, units=8, reader_s=0.5 if step <= 2 else 0.1)
        if step == 2:
            timer.end_warmup(barrier=lambda: barriers.append(step))
    assert barriers == [2]
    assert timer.finish() == pytest.approx(4.0)
    assert timer.measured_reader_s == pytest.approx(0.4)
    assert (timer.measured_samples, timer.measured_units) == (16, 32)  # steps 3..6 only
    assert clock.syncs >= 3  # construction, end of warm-up, finish


def test_logging_window_figures():
    clock = FakeClock()
    timer = WindowTimer(warmup_steps=0, sync=clock.sync, clock=clock)
    for step in range(1, 5):
        clock.now += 0.5
        timer.step_done(step, samples=32, units=32, reader_s=0.05)
    window = timer.close_window()
    assert window == pytest.approx({"ips": 64.0, "batch_cost_s": 0.5, "reader_cost_s": 0.05})
    clock.now += 1.0
    timer.step_done(5, samples=32, units=32, reader_s=0.0)
    assert timer.close_window()["ips"] == pytest.approx(32.0)
    assert timer.finish() == pytest.approx(3.0)


def test_a_caller_that_reports_late_passes_the_step_end():
    """The PS meter: warm-up ends inside a batch callback, and the job's last figures are taken
    after train_from_dataset returns, which must not count the time since the last batch."""
    clock = FakeClock()
    timer = WindowTimer(warmup_steps=1)
    timer.clock = clock
    clock.now = 5.0
    timer.step_done(1, samples=10, units=10)
    timer.end_warmup(now=5.0)
    for step in (2, 3):
        timer.step_done(step, samples=10, units=10)
    assert timer.close_window(now=7.0)["ips"] == pytest.approx(10.0)
    clock.now = 60.0  # train_from_dataset returned long after the last batch
    assert timer.finish(now=7.0) == pytest.approx(2.0)
    assert timer.measured_units == 20


def test_summarize_uses_sample_std():
    s = summarize([10.0, 12.0, 14.0])
    assert (s["n"], s["mean"], s["median"], s["min"], s["max"]) == (3, 12.0, 12.0, 10.0, 14.0)
    assert s["std"] == pytest.approx(2.0)
    assert summarize([5.0])["std"] == 0.0 and summarize([])["n"] == 0


def test_log_line_convention():
    line = log_line(40, 100, 2.31, 1234.5, "images/s", 0.052, 0.001)
    assert line == ("step 40/100 loss 2.3100 ips 1234.5 images/s avg_batch_cost 0.05200 s "
                    "avg_reader_cost 0.00100 s")
