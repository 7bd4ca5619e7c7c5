"""Running the probes on the nodes (the part of diagnose that runs commands), each reached as
fleetbench.hosts.reach reaches a host: emulated nodes through `ip netns exec` (in the node's CPU
cgroup when it is degraded), real hosts over SSH, the nodes of a Slurm allocation as one job step
each (`srun --nodelist NODE`).

Every test runs alone by default: a node's probe, then the next node's; a link test, then the
next. The emulated nodes share this machine's cores, so that is needed there; on real hosts
`--concurrent` runs each pass's node probes at once and each round's (disjoint) pairs at once.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from fleetbench.hosts import reach
from fleetbench.hosts.hostlist import Host

PROBE = ["-m", "fleetbench.diagnose.probe"]  # after the host's Python
# Every probe of this diagnosis carries it: a link test's two ends, which share the machine on
# emulated nodes, count each other as the diagnosis's own work, not as a neighbour's
# (fleetbench.measure.interference.job_markers reads it from each process's environment).
MARK = f"FLEETBENCH_JOB_ID=diagnose-{os.getpid()}-{random.randrange(1 << 32):08x}"


class ProbeFailed(RuntimeError):
    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


def _on(host: Host, *args: str) -> list[str]:
    """The probe with `args`, run on `host` (its own Python there)."""
    return reach.command(host, ["env", MARK, host.python, *PROBE, *args])


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line")


def _why(proc_or_text, host: Host) -> ProbeFailed:
    text = proc_or_text if isinstance(proc_or_text, str) else (proc_or_text.stderr or proc_or_text.stdout)
    tail = (text or "").strip().splitlines()[-1:] or ["no output"]
    # ssh itself exits 255 when it cannot reach or log in to the host (a remote command's own
    # exit status is passed through)
    unreachable = ("Cannot open network namespace" in (text or "") or "No such file" in (text or "")
                   or getattr(proc_or_text, "returncode", None) == 255)
    return ProbeFailed("unreachable" if unreachable else "failed", f"node {host.index} ({host.name}): {tail[0]}")


def node_probe(host: Host, seconds: float, timeout: float) -> dict:
    """matmul_gflops, triad_gbps and train_images_per_s of one node, or ProbeFailed (unreachable / failed)."""
    try:
        p = subprocess.run(_on(host, "node", "--seconds", str(seconds)),
                           capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ProbeFailed("failed", f"node {host.index} ({host.name}): probe did not end within {timeout:g} s") from None
    if p.returncode != 0:
        raise _why(p, host)
    return _last_json(p.stdout)


@contextlib.contextmanager
def _listener(cmd: list[str], what: str, timeout: float) -> Iterator[subprocess.Popen]:
    """The receiving end of a link test, stopped however the test ends; a test that outlives
    `timeout` is a failure of the link, not a crash."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    except subprocess.TimeoutExpired:
        raise ProbeFailed("failed", f"{what}: no result within {timeout:g} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def link_probe(a: Host, b: Host, seconds: float, timeout: float) -> dict:
    """Raw TCP from a to b for `seconds`: link_gbps as b received it (first byte to last), and the
    share of the test each end's probe waited for a CPU (a_cpu_wait: the sender's)."""
    with _listener(_on(b, "recv", b.address, "--timeout", str(timeout)), f"link {a.index}-{b.index}", timeout) as recv:
        first = recv.stdout.readline()  # `port N`, or nothing if the receiver failed to start
        if not first.startswith("port "):
            recv.wait(timeout)
            raise _why(recv.stderr.read() or first, b)
        send = subprocess.run(_on(a, "send", b.address, first.split()[1], "--seconds", str(seconds)),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if send.returncode != 0:
            raise _why(send, a)
        out, err = recv.communicate(timeout=timeout)
        if recv.returncode != 0:
            raise _why(err, b)
        got, sent = _last_json(out), _last_json(send.stdout)
        others = [x for x in (sent.get("others_cpu_pct"), got.get("others_cpu_pct")) if x is not None]
        return {"link_gbps": got["link_gbps"], "a_cpu_wait": sent.get("cpu_wait"), "b_cpu_wait": got.get("cpu_wait"),
                # each end's machine (one machine for emulated nodes): the more disturbed counts
                "others_cpu_pct": {"link_gbps": max(others)} if others else {}}


def iperf3_probe(a: Host, b: Host, seconds: float, timeout: float) -> dict:
    """iperf3 from a to b for `seconds` (one TCP stream, C, the field's tool): iperf3_gbps as b
    received it. A port taken on b is tried again on another."""
    for _ in range(3):
        port = str(random.randint(30000, 39999))
        server = reach.command(b, ["iperf3", "-s", "-1", "-B", b.address, "-p", port, "--forceflush"])
        with _listener(server, f"link {a.index}-{b.index} (iperf3)", timeout) as listening:
            if "Server listening" not in listening.stdout.readline() + listening.stdout.readline():
                continue  # a rule, then `Server listening on PORT`; else the port was taken
            client = subprocess.run(reach.command(a, ["iperf3", "-c", b.address, "-p", port, "-t", f"{seconds:g}",
                                                      "-J", "--connect-timeout", "5000"]),
                                    capture_output=True, text=True, timeout=timeout, check=False)
            got = json.loads(client.stdout or "{}")
            if client.returncode != 0 or "end" not in got:
                raise _why(got.get("error") or client.stderr or "iperf3 printed no result", a)
            return {"iperf3_gbps": got["end"]["sum_received"]["bits_per_second"] / 1e9}
    raise ProbeFailed("failed", f"node {b.index} ({b.name}): iperf3 -s could not listen (three ports tried)")


_PHASES = threading.Lock()


def timed(phases: dict, name: str, fn, *args):
    """fn(*args), adding its wall time to phases[name] (seconds; summed over tests run at once)."""
    start = time.monotonic()
    try:
        return fn(*args)
    finally:
        with _PHASES:
            phases[name] = round(phases.get(name, 0.0) + time.monotonic() - start, 2)


def each(calls: list, at_once: bool) -> list:
    """Every zero-argument call's result, in order, a ProbeFailed in place of a result: one call
    after another, or all at once (`at_once`: real hosts that share no cores; each thread only
    waits on its own ssh or srun)."""
    def safe(call):
        try:
            return call()
        except ProbeFailed as e:
            return e

    if not at_once or len(calls) < 2:
        return [safe(c) for c in calls]
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(safe, calls))
