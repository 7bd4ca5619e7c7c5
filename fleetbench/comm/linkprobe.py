"""The raw TCP rate between two nodes: the limit the comm benchmark's busbw is compared with.

Before the collectives, rank 0 streams bytes for `seconds` over one plain TCP connection to the
first rank on another node (by the hosts of PADDLE_TRAINER_ENDPOINTS), through the same link the
collectives use (on the emulated cluster: the shaped veth pair between two namespaces). The
receiver's rate, bytes / (end of stream - first byte), is what one TCP stream gets from the
wire. A job on one node has no link to probe (loopback is not a link): no figure.
"""
import os
import socket
import time
from typing import Optional

CHUNK = 1 << 20
CONNECT_TIMEOUT_S = 20.0


def endpoint_hosts(environ=os.environ) -> list:
    """Host of every rank, by rank, from the launcher's PADDLE_TRAINER_ENDPOINTS (empty if unset)."""
    text = environ.get("PADDLE_TRAINER_ENDPOINTS", "")
    return [endpoint.rsplit(":", 1)[0] for endpoint in text.split(",") if endpoint]


def pair(hosts: list) -> Optional[tuple]:
    """(sender, receiver) ranks: rank 0 and the first rank on another host; None on one host."""
    return next(((0, rank) for rank, host in enumerate(hosts) if hosts and host != hosts[0]), None)


def listen(host: str) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((host, 0))
    server.listen(1)
    return server


def receive(server: socket.socket, timeout_s: float) -> tuple:
    """Accept one stream and read it to its end: (bytes, seconds from first byte to the end)."""
    server.settimeout(timeout_s)
    conn, _ = server.accept()
    with conn:
        conn.settimeout(timeout_s)
        buffer = memoryview(bytearray(CHUNK))
        received = conn.recv_into(buffer)
        first = time.perf_counter()
        while True:
            got = conn.recv_into(buffer)
            if not got:
                return received, time.perf_counter() - first
            received += got


def stream(host: str, port: int, seconds: float) -> int:
    """Send for `seconds` to host:port; returns the bytes handed to the kernel."""
    payload = bytes(CHUNK)
    sent = 0
    with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as conn:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            conn.sendall(payload)
            sent += CHUNK
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # the receiver closes after reading everything: the stream has arrived
    return sent


def probe(rank: int, seconds: float, communicator, hosts: Optional[list] = None) -> dict:
    """Every rank calls this together; returns the record's link metrics (None figures on one node
    or when the probe is off). `communicator` is a fleetbench.measure.metrics.Communicator."""
    hosts = endpoint_hosts() if hosts is None else hosts
    ends = pair(hosts)
    if ends is None or seconds <= 0:
        return {"link_tcp_GBps": None, "link_tcp_note": "off" if seconds <= 0 else "one node: no link"}
    sender, receiver = ends
    server = listen(hosts[receiver]) if rank == receiver else None
    port = int(communicator.sum([float(server.getsockname()[1]) if server else 0.0])[0])
    rate, note = 0.0, ""
    try:
        if rank == sender:
            stream(hosts[receiver], port, seconds)
        elif rank == receiver:
            nbytes, elapsed = receive(server, CONNECT_TIMEOUT_S + seconds)
            rate = nbytes / elapsed / 1e9
    except OSError as err:  # a failed probe leaves the collectives' figures standing
        rate, note = -1.0, f"rank {rank}: {err}"
    finally:
        if server is not None:
            server.close()
    rate = communicator.sum([rate])[0]
    failed = rate < 0 or bool(note)
    return {"link_tcp_GBps": None if failed else rate, "link_tcp_seconds": seconds,
            "link_tcp_note": note or ("failed on another rank" if failed else
                                      f"one TCP stream, {hosts[sender]} -> {hosts[receiver]}")}
