"""The parameter-server step breakdown's pure parts (train/ps/marks.py, stepparts.py, servers.py):
where marks go in a program's op list, how marks and meter calls make a window's parts, the
record's block and the servers' rows; /proc reads of this process. Real jobs: tests/job/test_ps_breakdown.py."""
import math
import os
import subprocess
import threading

import pytest
from util import PYTHON, wait_for

from fleetbench.measure import metrics
from fleetbench.train.ps import commthread, marks, servers, stepparts

ASYNC_OPS = ["distributed_lookup_table", "distributed_lookup_table", "reshape2", "concat", "mul",
             "py_func", "mul_grad", "concat_grad", "distributed_push_sparse", "send", "send"]


def test_marks_go_at_every_change_of_part_and_at_both_ends():
    places = marks.boundaries(ASYNC_OPS)
    assert places == [(0, "reader"), (2, "pull"), (5, "compute"), (6, "meter"), (8, "compute"), (11, "push")]
    # GEO: no pull on the step's thread, the lookups are local (compute)
    assert marks.boundaries(["lookup_table_v2", "mul", "py_func", "sgd", "send"]) == [
        (0, "reader"), (2, "compute"), (3, "meter"), (4, "compute"), (5, "push")]
    assert marks.boundaries([]) == [] and marks.boundaries(["send"]) == [(0, "reader"), (1, "push")]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _batch(m, clock, steps, window_open, durations):
    """One batch on this thread: the reader mark, then each part's ops; the meter's call after compute."""
    for part, seconds in durations:
        if part == "meter":
            m.meter_called(steps, window_open)
        clock.now += seconds
        m.hit(part)


def test_a_window_holds_whole_meter_to_meter_stretches_and_nothing_after_the_last_call():
    clock = Clock()
    m = marks.Marks(keep_spans=True, clock=clock)
    parts = [("reader", 0.001), ("pull", 0.004), ("compute", 0.002), ("meter", 0.0005), ("compute", 0.003),
             ("push", 0.0015)]
    m.hit("reader")  # the first op's mark: no interval yet
    for step in range(1, 7):  # warm-up is steps 1-2: the window opens at step 2's meter call
        _batch(m, clock, step, step >= 2, parts)
    # committed: from step 2's meter call to step 6's, i.e. four whole batches, each 12 ms
    per_batch = dict(reader=0.001, pull=0.004, compute=0.005, push=0.0015, meter=0.0005)
    assert m.totals == pytest.approx({p: 4 * s for p, s in per_batch.items()})
    assert sum(m.totals.values()) == pytest.approx(4 * 0.012)
    assert {s[3] for s in m.spans} == {3, 4, 5, 6} and all(s[2] > s[1] for s in m.spans)


def test_threads_keep_their_own_marks():
    m = marks.Marks()
    m.open = True
    done, together = [], threading.Barrier(3)  # alive at once: no thread reuses another's ident

    def worker():
        together.wait()
        m.hit("reader")
        m.hit("pull")
        m.meter_called(1, True)
        done.append(True)
        together.wait()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(done) == 3 and m.totals["pull"] >= 0 and m.totals["reader"] == 0  # no thread saw another's mark


def test_a_row_adds_up_and_the_block_says_whether_it_covers_the_step():
    totals = {"reader": 0.2, "pull": 0.9, "compute": 1.5, "push": 0.3, "meter": 0.05}
    mine = stepparts.row(totals, 1, 500, 3.0, 1.5)
    r = dict(zip(stepparts.ROW, mine))
    assert r["step"] == pytest.approx(6.0) and r["pull"] == pytest.approx(1.8)
    assert sum(r[p] for p in marks.PARTS) + r["other"] == pytest.approx(r["step"])
    assert r["client_cpu"] == pytest.approx(3.0)
    block = stepparts.block(mine, [0.6, math.nan], 3.0, metrics.Alone(), ["h:1", "h:2"], 1)
    assert block["family"] == "ps" and block["units"] == "ms per measured step" and block["adds_up"] is True
    assert block["ranks"][0]["covered"] == pytest.approx(1 - 0.1 / 6.0)
    # a step of 8 ms the same parts cover to 74 %: it does not add up
    assert stepparts.block(stepparts.row(totals, 1, 500, 4.0, 0.0), [], 4.0, metrics.Alone(), [], 1)[
        "adds_up"] is False
    assert block["servers"][0] == {"endpoint": "h:1", "cpu_s": 0.6, "window_s": 3.0, "seen_by_worker": 0,
                                   "busy": pytest.approx(0.2)}
    assert block["servers"][1]["cpu_s"] is None and block["servers"][1]["busy"] is None
    # two dataset threads: thread time halved; no communicator figures: null
    two = dict(zip(stepparts.ROW, stepparts.row(totals, 2, 500, 3.0, math.nan)))
    assert two["pull"] == pytest.approx(0.9) and math.isnan(two["client_cpu"])
    assert stepparts.block(stepparts.row(totals, 2, 500, 3.0, math.nan), [], 3.0, metrics.Alone(), [], 2)["ranks"][0][
        "client_cpu"] is None


def test_a_server_is_timed_over_the_slowest_workers_window_when_it_saw_it():
    seen = [[0.5, math.nan], [0.9, 0.4]]
    rows = stepparts.server_rows(["a:1", "b:2"], seen, [2.0, 3.0], slowest=1)
    assert rows[0]["seen_by_worker"] == 1 and rows[0]["busy"] == pytest.approx(0.3)
    rows = stepparts.server_rows(["a:1", "b:2"], [[0.5, math.nan], [math.nan, 0.4]], [2.0, 3.0], slowest=1)
    assert rows[0]["seen_by_worker"] == 0 and rows[0]["busy"] == pytest.approx(0.25)
    assert rows[1]["seen_by_worker"] == 1


def test_probe_block_names_each_workers_and_servers_figures():
    out = stepparts.probes(metrics.Alone(), [100.0, 90.0, 20.0, math.nan, 21.0, 20.5], ["a:1", "b:2"],
                           {"b:2": [50.0, 51.0, 9.0, 9.5, 18.0, 18.5]})
    assert out["workers"] == [dict(zip(metrics.PROBE_KEYS, [100.0, 90.0, 20.0, None, 21.0, 20.5]))]
    assert out["servers"][0] == {"endpoint": "a:1", **dict.fromkeys(metrics.PROBE_KEYS)}
    assert out["servers"][1]["probe_gemm_gflops_after"] == 51.0 and out["servers"][1]["probe_scalar_mops_after"] == 18.5


def test_cpu_seconds_of_a_process_grow_as_it_works_and_are_nan_once_it_is_gone():
    child = subprocess.Popen([PYTHON, "-c", "import sys\nx = 0\nfor i in range(3 * 10**7): x += i\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, text=True)
    try:
        first = servers.cpu_seconds([child.pid, None])
        assert math.isnan(first[1]) and first[0] >= 0
        assert wait_for(lambda: servers.cpu_seconds([child.pid])[0] >= 0.2, 60)  # the loop takes ~1 s of CPU
    finally:
        child.communicate("")
    assert math.isnan(servers.cpu_seconds([child.pid])[0])


def test_a_server_is_found_by_its_role_endpoint_and_job(tmp_path):
    job = {"PADDLE_TRAINER_ENDPOINTS": f"127.0.0.1:{os.getpid()}"}
    theirs = {**os.environ, **job, "TRAINING_ROLE": "PSERVER", "POD_IP": "127.0.0.1", "PADDLE_PORT": "6170"}
    # a wrapper that runs the server: the inner process is the server
    wrapper = subprocess.Popen([PYTHON, "-c", f"import subprocess,sys; subprocess.run([sys.executable, '-c', "
                                              f"'import sys; sys.stdin.read()'])"], env=theirs,
                               stdin=subprocess.PIPE, text=True)
    other = subprocess.Popen([PYTHON, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, text=True,
                             env={**theirs, "PADDLE_TRAINER_ENDPOINTS": "another job"})
    try:
        def inner_started():
            found.update(servers.find(["127.0.0.1:6170", "127.0.0.1:6171"], job))
            return found.get("127.0.0.1:6170") not in (None, wrapper.pid)

        found = {}
        assert wait_for(inner_started, 30)
        assert list(found) == ["127.0.0.1:6170"] and found["127.0.0.1:6170"] not in (wrapper.pid, other.pid)
    finally:
        wrapper.stdin.close()  # the inner process inherits the pipe: both end
        other.communicate("")
        wrapper.wait()


def test_a_servers_probe_figures_are_handed_over_in_its_file():
    pid = os.getpid()
    held = servers.hand_over()
    servers.write_probe("before", [100.0, 20.0])
    assert servers.read_probe(pid) == {"before": [100.0, 20.0]}
    servers.write_probe("after", [90.0, 19.0])
    assert servers.collect_probes({"h:1": pid}, deadline_s=0) == {"h:1": [100.0, 90.0, 20.0, 19.0]}
    assert servers.collect_probes({"h:1": pid}, deadline_s=0)["h:1"][1] == 90.0  # another worker reads it too
    servers.forget({"h:1": pid})
    assert not servers.probe_file(pid).exists()
    servers.wait_read(60)  # read: returns at once
    held.close()
    assert not servers.probe_dir(pid).exists()
    out = servers.collect_probes({"h:1": pid}, deadline_s=0)  # none written: NaN, no wait
    assert all(math.isnan(v) for v in out["h:1"])


def test_a_threads_cpu_time_is_read_while_it_lives():
    before = commthread.threads()
    ready, stop = threading.Event(), threading.Event()

    def spin():
        x = 0
        while not stop.is_set():
            x += 1
            if x == 10**6:
                ready.set()

    t = threading.Thread(target=spin)
    t.start()
    try:
        mine = commthread.threads() - before
        assert len(mine) == 1
        assert ready.wait(60)
        assert commthread.cpu_seconds(mine) > 0
    finally:
        stop.set()
        t.join()
    assert math.isnan(commthread.cpu_seconds(set()))
