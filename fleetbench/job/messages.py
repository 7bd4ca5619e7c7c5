"""What a rank's last words mean: one table of the failure messages the libraries under a job write,
read from their source, each row naming the file that writes it (pure: text in, a row out).

A failed job's ranks are causes or victims. A victim is a rank that died because another did:
its collective timed out waiting for a peer that never came, or its connection to a peer that went
away broke. Which message a victim prints depends on what it was doing when the peer went (reading
or writing, in a collective or between two), so the table holds every message of each family, not
the one seen once: Paddle 2.6.2 and 3.3.1 both build gloo from Paddle's fork (third_party/gloo,
github.com/ziyoujiyi/gloo tag v0.0.3, the same file and line numbers in both builds' messages), whose
changes matter here: an orderly close by the peer (read() returns 0) is reported as a *TIMEOUT*
(pair.cc, "TIMEOUT self_rank = ... pair_rank = ... peer_str = ...", where upstream gloo says
"Connection closed by peer"), as are read, write and connect time-outs. So "TIMEOUT" names a victim
either way, and only what the supervisor saw of the other ranks (verdict.py) names the cause.

GLOO_ERROR_MSG prefixes "[FILE:LINE] "; Paddle surfaces gloo's exceptions as a Python RuntimeError
(paddle.distributed calls) or, from the DataParallel reducer's hook thread, as std::terminate's
"terminate called after throwing an instance of 'gloo::IoException'" / "what(): ..." and SIGABRT.
"""
from __future__ import annotations

import dataclasses
import re

GLOO = "gloo v0.0.3 (Paddle's third_party/gloo)"

# meanings: who a rank printing the message is
PEER_LOST = "peer lost"               # a victim: a peer went away (killed, exited, host lost)
COLLECTIVE_TIMEOUT = "collective timeout"  # a victim: a peer never came to the collective
RENDEZVOUS = "rendezvous failure"     # before any step: the job's start-up failed (run it again)
START_UP_STUCK = "start-up stuck"     # before any step: a PS start-up barrier never released
START_UP_LOST = "start-up state lost"  # before any step: PS parameters did not come back as pushed
OUT_OF_MEMORY = "out of memory"       # the rank itself ran out: a cause
VICTIM = (PEER_LOST, COLLECTIVE_TIMEOUT)
START_UP = (RENDEZVOUS, START_UP_STUCK, START_UP_LOST)

_ERRNO_PEER = r"(?:Connection reset by peer|Broken pipe|Connection timed out|No route to host|" \
              r"Network is unreachable|Transport endpoint is not connected|Connection refused)"


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    meaning: str
    pattern: re.Pattern
    source: str    # the file (and the call) that writes it
    example: str   # a real line as Paddle prints it; the table's test feeds it back


def _f(name: str, meaning: str, pattern: str, source: str, example: str) -> Family:
    return Family(name, meaning, re.compile(pattern), source, example)


TABLE = (
    # gloo's TCP pair: a socket call on a connection whose peer is gone
    _f("gloo read error", PEER_LOST, r"gloo/transport/tcp/pair\.cc:\d+\] Read error \S+: " + _ERRNO_PEER,
       f"{GLOO} gloo/transport/tcp/pair.cc Pair::read: recv() -1, GLOO_ERROR_MSG(\"Read error \", peer, strerror)",
       "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:576] Read error [127.0.0.1]:36011: "
       "Connection reset by peer"),
    _f("gloo write error", PEER_LOST, r"gloo/transport/tcp/pair\.cc:\d+\] writev \S+: " + _ERRNO_PEER,
       f"{GLOO} gloo/transport/tcp/pair.cc Pair::write: writev() -1, GLOO_ERROR_MSG(\"writev \", peer, strerror)",
       "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:383] writev [127.0.0.1]:165: Broken pipe"),
    _f("gloo socket closed", PEER_LOST, r"gloo/transport/tcp/pair\.cc:\d+\] Socket (?:unexpectedly )?closed ",
       f"{GLOO} gloo/transport/tcp/pair.cc Pair::verifyConnected / setSync: the socket closed under a pair",
       "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:918] Socket closed [127.0.0.1]:36011"),
    _f("gloo closed by peer", PEER_LOST, r"gloo/transport/tcp/pair\.cc:\d+\] Connection closed by peer ",
       "upstream gloo's gloo/transport/tcp/pair.cc Pair::read (rv == 0); Paddle's fork says TIMEOUT instead",
       "RuntimeError: [/gloo/gloo/transport/tcp/pair.cc:585] Connection closed by peer [127.0.0.1]:36011"),
    # gloo's time-outs: the fork writes one text for a pair's read, write and connect time-outs and
    # for its peer's orderly close; the unbound buffers (send/recv of the collectives) too
    _f("gloo pair TIMEOUT", COLLECTIVE_TIMEOUT,
       r"gloo/transport/tcp/(?:pair|buffer)\.cc:\d+\] TIMEOUT self_rank = \d+ pair_rank = \d+",
       f"{GLOO} gloo/transport/tcp/pair.cc Pair::read (EAGAIN past the timeout, or rv == 0: the peer closed), "
       "Pair::write, Pair::waitUntilConnected; buffer.cc Buffer::waitRecv/waitSend: gloo::TimeoutException",
       "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:585] TIMEOUT self_rank = 0 "
       "pair_rank = 1 peer_str = [127.0.0.1]:36011"),
    _f("gloo unbound buffer TIMEOUT", COLLECTIVE_TIMEOUT,
       r"gloo/transport/tcp/unbound_buffer\.cc:\d+\] (?:TIMEOUT self_rank = |Timed out waiting )",
       f"{GLOO} gloo/transport/tcp/unbound_buffer.cc UnboundBuffer::waitRecv/waitSend: gloo::TimeoutException "
       "(upstream: \"Timed out waiting Nms for recv operation to complete\")",
       "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] TIMEOUT self_rank = none "
       "pair_rank = 1 peer_str = none"),
    _f("gloo pairs closed after a timeout", COLLECTIVE_TIMEOUT, r"Application timeout caused pair closure",
       f"{GLOO} gloo/transport/tcp/unbound_buffer.cc: context->signalTimeoutException closes every pair",
       "RuntimeError: Application timeout caused pair closure"),
    _f("gloo exception type", COLLECTIVE_TIMEOUT, r"gloo::TimeoutException",
       f"{GLOO} gloo/common/error.h TimeoutException, named by std::terminate from the reducer's hook thread",
       "terminate called after throwing an instance of 'gloo::TimeoutException'"),
    _f("gloo io exception type", PEER_LOST, r"gloo::IoException",
       f"{GLOO} gloo/common/error.h IoException (Pair::signalException), named by std::terminate",
       "terminate called after throwing an instance of 'gloo::IoException'"),
    # NCCL (GPU builds; untested here): a peer's process gone, or the watchdog's abort
    _f("NCCL remote error", PEER_LOST,
       r"ncclRemoteError|NET/(?:Socket|IB) ?: .*(?:Connection closed by remote peer|closed by remote peer)",
       "NCCL src/transport/net_socket.cc (\"Connection closed by remote peer\"), src/misc/argcheck.h "
       "ncclRemoteError (\"remote process exiting prematurely\"); Paddle's NCCL_CHECK prints the name",
       "NCCL WARN NET/Socket : Connection closed by remote peer 10.0.0.2<45678>"),
    _f("NCCL timeout", COLLECTIVE_TIMEOUT,
       r"(?i)nccl\w*\W.*\btime(?:d ?)?out|Watchdog caught collective operation timeout|comm task.*timeout",
       "Paddle paddle/fluid/distributed/collective/process_group_nccl.cc and phi/core/distributed/comm_task_manager.cc "
       "(the comm task watchdog), NCCL's ncclCommAbort after NCCL_TIMEOUT",
       "RuntimeError: (PreconditionNotMet) NCCL timeout in allreduce (comm task manager)"),
    # the parameter server's brpc client: its server is gone
    _f("PS client request failed", PEER_LOST,
       r"brpc_ps_client\.cc:\d+\].*failed, err:|\[E(?:111|112|104|1014)\](?:Fail to connect|Not connected to|"
       r"Connection reset by peer|Got EOF)",
       "Paddle paddle/fluid/distributed/ps/service/brpc_ps_client.cc (\"resquest cmd_id:N failed, err:\"), brpc's "
       "errno texts ([E111] ECONNREFUSED, [E112] not connected, [E104] reset, [E1014] EOF)",
       "E1127 20:31:02.123 brpc_ps_client.cc:195] resquest cmd_id:2 failed, err:[E111]Fail to connect "
       "SocketId=8589934593@127.0.0.1:6071: Connection refused"),
    # before the first step: the rendezvous (gloo's connect, Paddle's stores) or a stuck PS barrier
    _f("gloo connect failed", RENDEZVOUS,
       r"gloo/transport/tcp/pair\.cc:\d+\] connect:? \S*:? ?(?:Connection refused|No route to host|"
       r"Connection timed out)",
       f"{GLOO} gloo/transport/tcp/pair.cc Pair::connect / handleConnecting: connect() failed",
       "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.0.1]:27683: "
       "Connection refused"),
    _f("gloo process group creation", RENDEZVOUS, r"ProcessGroupGloo",
       "Paddle python/paddle/distributed/collective.py new_group -> core.ProcessGroupGloo.create (a traceback)",
       "  File \".../process_group.py\", in new_group: pg = core.ProcessGroupGloo.create(store, rank, size)"),
    _f("Paddle store timeout", RENDEZVOUS, r"TIMEOUT self_rank = \d+ pair_rank = -?\d+$|Wait timeout for key",
       "Paddle paddle/fluid/framework/fleet/gloo_wrapper.cc HdfsStore::wait; gloo/rendezvous/http_store.cc",
       "RuntimeError: (ExecutionTimeout) TIMEOUT self_rank = 1 pair_rank = 0"),
    _f("PS start-up deadline", START_UP_STUCK, r"^Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!$",
       "fleetbench/train/ps/paddle26.py init_deadline: faulthandler.dump_traceback_later's header",
       "Timeout (0:02:00)!"),
    _f("PS start-up parameters", START_UP_LOST, r"PS start-up: parameter \S+ \(and \d+ more\) is not what worker 0 pushed",
       "fleetbench/train/ps/driver.py start_up_problem, through WorkerJob.fail_together's \"error: worker N: \"",
       "error: worker 0: PS start-up: parameter fc_0.w_0 (and 5 more) is not what worker 0 pushed (sum 3.214, "
       "sum of squares 1101.5; this worker holds 0, 0)"),
    # the rank's own failure
    _f("out of memory", OUT_OF_MEMORY,
       r"ResourceExhaustedError|Out of memory error on GPU|\bMemoryError\b|std::bad_alloc|CUDA out of memory",
       "Paddle paddle/phi/core/memory/allocation (ResourceExhausted), Python's MemoryError, libstdc++'s bad_alloc",
       "ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 2.0GB memory on GPU 0"),
)


def family(line: str) -> Family | None:
    """The first family of TABLE whose pattern the line holds, or None."""
    return next((f for f in TABLE if f.pattern.search(line)), None)


def meanings(lines: list[str]) -> dict[str, str]:
    """{meaning: the first line that says it} over a rank's log lines."""
    found = {}
    for line in lines:
        f = family(line)
        if f is not None and f.meaning not in found:
            found[f.meaning] = line.strip()
    return found


def victim_line(lines: list[str]) -> str | None:
    """The first line saying the rank died of a peer (lost, or never came to a collective), or
    None. A failed rendezvous is not: the rank that printed it is named (no step was measured, and
    the job is started once more), as a peer slow to start on a loaded host is no culprit either."""
    found = meanings(lines)
    return next((found[m] for m in VICTIM if m in found), None)


def start_up_failure(line: str) -> bool:
    """The line says the job failed starting up (gloo's rendezvous, or a stuck PS start-up
    barrier). Only before any step does it mean that: the supervisor asks that first."""
    f = family(line)
    if f is None:
        return False
    # a connection lost or timed out before the first step is the rendezvous's too
    return f.meaning in START_UP or (f.meaning in VICTIM and f.name.startswith("gloo"))
