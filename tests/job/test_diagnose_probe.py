"""What else used the machine while diagnose measured (issue 35): the probe says, for each figure,
the share of the machine's CPU others took meanwhile; a link test's two ends (which share the
machine on emulated nodes) are the diagnosis's own work, not each other's neighbour."""
import json
import os
import signal
import subprocess
import sys

from fleetbench.diagnose import run
from fleetbench.hosts.hostlist import Host
from fleetbench.measure import interference

HOG = [sys.executable, "-c", "while True: pass"]


def test_a_probe_beside_busy_processes_says_how_much_of_the_machine_they_took():
    hogs = [subprocess.Popen(HOG) for _ in range(os.cpu_count() or 1)]  # one per core: the probe gets a share
    try:
        p = subprocess.run(run._on(Host("here", reach="local"), "node", "--seconds", "0.3"),
                           capture_output=True, text=True, timeout=120, check=True)
    finally:
        for hog in hogs:
            hog.send_signal(signal.SIGKILL)
            hog.wait()
    figures = json.loads(p.stdout.splitlines()[-1])
    others = figures["others_cpu_pct"]
    assert set(others) == {"matmul_gflops", "triad_gbps", "train_images_per_s"}, figures
    # a hog per core takes about half the machine from a probe that wants all of it; well above
    # the 10% that makes a figure unjudged, whatever else this tier runs beside
    assert all(pct > 25 for pct in others.values()), others


def test_a_link_tests_receiving_end_is_the_diagnosis_own_work_not_a_neighbour():
    here = Host("here", reach="local", address="127.0.0.1")
    recv = subprocess.Popen(run._on(here, "recv", "127.0.0.1", "--timeout", "30"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        port = recv.stdout.readline().split()[1]
        stats = interference._stats()
        # what the sender's probe finds as the job's processes: those carrying the diagnosis's mark
        assert recv.pid in interference.job_processes(stats, [run.MARK], os.getpid())
        assert recv.pid not in interference.job_processes(stats, ["FLEETBENCH_JOB_ID=another-job"], os.getpid())
        sent = subprocess.run(run._on(here, "send", "127.0.0.1", port, "--seconds", "0.2"),
                              capture_output=True, text=True, timeout=60, check=True)
        out, _ = recv.communicate(timeout=60)
    finally:
        if recv.poll() is None:
            recv.kill()
        recv.wait()
    got, sent = json.loads(out.splitlines()[-1]), json.loads(sent.stdout.splitlines()[-1])
    assert got["link_gbps"] > 0 and got["others_cpu_pct"] is not None and sent["others_cpu_pct"] is not None
