"""Running the probes on emulated nodes (the part of diagnose that runs commands).

The emulated nodes share this machine's cores, so every test runs alone: a node's probe, then the
next node's; a link test, then the next. On real hosts the per-node probes would run at once.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

from fleetbench.emulate import degrade

PROBE = [sys.executable, "-m", "fleetbench.diagnose.probe"]


@dataclass(frozen=True)
class Host:
    index: int
    netns: str
    ip: str


class ProbeFailed(RuntimeError):
    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


def _in_node(host: Host, cmd: list[str]) -> list[str]:
    if not host.netns:  # this machine
        return cmd
    return degrade.in_node(host.netns, cmd)


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line")


def _why(proc_or_text, host: Host) -> ProbeFailed:
    text = proc_or_text if isinstance(proc_or_text, str) else (proc_or_text.stderr or proc_or_text.stdout)
    tail = (text or "").strip().splitlines()[-1:] or ["no output"]
    unreachable = "Cannot open network namespace" in (text or "") or "No such file" in (text or "")
    return ProbeFailed("unreachable" if unreachable else "failed", f"node {host.index} ({host.netns}): {tail[0]}")


def node_probe(host: Host, seconds: float, timeout: float) -> dict:
    """matmul_gflops, triad_gbps and train_images_per_s of one node, or ProbeFailed (unreachable / failed)."""
    try:
        p = subprocess.run(_in_node(host, PROBE + ["node", "--seconds", str(seconds)]),
                           capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ProbeFailed("failed", f"node {host.index} ({host.netns}): probe did not end within {timeout:g} s") from None
    if p.returncode != 0:
        raise _why(p, host)
    return _last_json(p.stdout)


def link_probe(a: Host, b: Host, seconds: float, timeout: float) -> dict:
    """Raw TCP from a to b for `seconds`: link_gbps as b received it (first byte to last)."""
    recv = subprocess.Popen(_in_node(b, PROBE + ["recv", b.ip, "--timeout", str(timeout)]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = recv.stdout.readline()  # `port N`, or nothing if the receiver failed to start
        if not first.startswith("port "):
            recv.wait(timeout)
            raise _why(recv.stderr.read() or first, b)
        send = subprocess.run(_in_node(a, PROBE + ["send", b.ip, first.split()[1], "--seconds", str(seconds)]),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if send.returncode != 0:
            raise _why(send, a)
        out, err = recv.communicate(timeout=timeout)
        if recv.returncode != 0:
            raise _why(err, b)
        return {"link_gbps": _last_json(out)["link_gbps"]}
    except subprocess.TimeoutExpired:
        raise ProbeFailed("failed", f"link {a.index}-{b.index}: no result within {timeout:g} s") from None
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()


def timed(phases: dict, name: str, fn, *args):
    """fn(*args), adding its wall time to phases[name] (seconds)."""
    start = time.monotonic()
    try:
        return fn(*args)
    finally:
        phases[name] = round(phases.get(name, 0.0) + time.monotonic() - start, 2)
