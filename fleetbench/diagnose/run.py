"""Running the probes on the nodes (the part of diagnose that runs commands), each reached as
fleetbench.hosts.reach reaches a host: emulated nodes through `ip netns exec` (in the node's CPU
cgroup when it is degraded), real hosts over SSH, the nodes of a Slurm allocation as one job step
each (`srun --nodelist NODE`).

Every test runs alone by default: a node's probe, then the next node's; a link test, then the
next. The emulated nodes share this machine's cores, so that is needed there; on real hosts
`--concurrent` runs each pass's node probes at once and each round's (disjoint) pairs at once.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from fleetbench.hosts import reach
from fleetbench.hosts.hostlist import Host

PROBE = ["-m", "fleetbench.diagnose.probe"]  # after the host's Python


class ProbeFailed(RuntimeError):
    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


def _on(host: Host, *args: str) -> list[str]:
    """The probe with `args`, run on `host` (its own Python there)."""
    return reach.command(host, [host.python, *PROBE, *args])


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


def link_probe(a: Host, b: Host, seconds: float, timeout: float) -> dict:
    """Raw TCP from a to b for `seconds`: link_gbps as b received it (first byte to last), and the
    share of the test each end's probe waited for a CPU (a_cpu_wait: the sender's)."""
    recv = subprocess.Popen(_on(b, "recv", b.address, "--timeout", str(timeout)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
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
        got = _last_json(out)
        return {"link_gbps": got["link_gbps"], "a_cpu_wait": _last_json(send.stdout).get("cpu_wait"),
                "b_cpu_wait": got.get("cpu_wait")}
    except subprocess.TimeoutExpired:
        raise ProbeFailed("failed", f"link {a.index}-{b.index}: no result within {timeout:g} s") from None
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()


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
