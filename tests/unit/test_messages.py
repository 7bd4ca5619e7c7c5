"""The failure-message table (fleetbench.job.messages): each row's real line, as Paddle prints it,
is read back as that row; lines of other families and healthy lines are not."""
import pytest

from fleetbench.job import messages

ROWS = {f.name: f for f in messages.TABLE}


@pytest.mark.parametrize("row", messages.TABLE, ids=lambda f: f.name)
def test_each_row_reads_its_own_example(row):
    assert messages.family(row.example) is row
    assert row.source and row.meaning in (*messages.VICTIM, *messages.START_UP, messages.OUT_OF_MEMORY)


def test_names_are_unique():
    assert len(ROWS) == len(messages.TABLE)


# what a victim prints depends on what it was doing when its peer went: every errno gloo's pair
# can pass to strerror for a lost peer, on both socket calls, is the same meaning
PEER_ERRNOS = ["Connection reset by peer", "Broken pipe", "Connection timed out", "No route to host",
               "Network is unreachable", "Transport endpoint is not connected"]


@pytest.mark.parametrize("errno_text", PEER_ERRNOS)
@pytest.mark.parametrize("call, line_no", [("Read error", 576), ("writev", 383)])
def test_gloo_socket_errors_on_a_lost_peer_are_peer_lost(call, line_no, errno_text):
    for prefix in ("RuntimeError: ", "  what():  ", ""):
        line = (f"{prefix}[/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:{line_no}] {call} "
                f"[10.0.3.2]:45123: {errno_text}")
        assert messages.family(line).meaning == messages.PEER_LOST, line


@pytest.mark.parametrize("line", [
    # Paddle's fork raises this for read/write/connect time-outs and for the peer's orderly close
    "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:585] TIMEOUT self_rank = 1 pair_rank = 0 "
    "peer_str = [127.0.0.1]:40021",
    "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:366] TIMEOUT self_rank = 0 pair_rank = 3 "
    "peer_str = [10.0.3.5]:6170",
    "  what():  [/paddle/third_party/gloo/gloo/transport/tcp/buffer.cc:73] TIMEOUT self_rank = 2 pair_rank = 1 "
    "peer_str = [127.0.0.1]:1",
    "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:133] TIMEOUT self_rank = 0 "
    "pair_rank = none peer_str = none",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms for recv "
    "operation to complete",
    "terminate called after throwing an instance of 'gloo::TimeoutException'",
])
def test_gloo_timeouts_of_every_kind_are_collective_timeouts(line):
    assert messages.family(line).meaning == messages.COLLECTIVE_TIMEOUT


@pytest.mark.parametrize("line", [
    "step 3/6 loss 0.3333 ips 160.0 samples/s avg_batch_cost 0.05000 s avg_reader_cost 0.00000 s",
    "W1127 20:11:03.555 gloo_context.cc:41] gloo timeout 30 s",
    "fleet pull sparse from 127.0.0.1:6000 failed: Connection refused",  # a PS RPC log, not brpc's client
    "ValueError: preset 'huge' is not defined",
    "RuntimeError: Timeout (0:05:00)!",
    "I1127 server.cc:1082] Server[paddle::distributed::BrpcPsService] is serving on port=6070.",
])
def test_healthy_and_foreign_lines_have_no_family(line):
    assert messages.family(line) is None


def test_a_rank_s_tail_is_read_for_its_first_victim_line():
    tail = ["step 2/9 loss 1.0", "Traceback (most recent call last):",
            "RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:383] writev [127.0.0.1]:165: Broken pipe"]
    assert messages.victim_line(tail) == tail[-1]
    assert messages.meanings(tail) == {messages.PEER_LOST: tail[-1]}
    assert messages.victim_line(["Traceback", "ValueError: x"]) is None
    oom = ["MemoryError: Unable to allocate 2.00 GiB"]
    assert messages.victim_line(oom) is None and messages.meanings(oom) == {messages.OUT_OF_MEMORY: oom[0]}


@pytest.mark.parametrize("line, start_up", [
    ("RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.0.1]:27683: "
     "Connection refused", True),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms", True),
    ("RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:585] TIMEOUT self_rank = 1 pair_rank = 0 "
     "peer_str = [127.0.0.1]:40021", True),
    ("RuntimeError: (ExecutionTimeout) TIMEOUT self_rank = 1 pair_rank = 0", True),
    ("Timeout (0:02:00)!", True),
    ("E1127 brpc_ps_client.cc:195] resquest cmd_id:2 failed, err:[E111]Fail to connect SocketId=1@127.0.0.1:6071: "
     "Connection refused", False),  # a PS server gone is not a rendezvous to retry
    ("MemoryError", False),
])
def test_which_families_mark_a_start_up_failure(line, start_up):
    assert messages.start_up_failure(line) is start_up
