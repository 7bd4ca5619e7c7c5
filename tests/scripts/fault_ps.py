"""A tiny parameter-server-shaped job (no Paddle training): each step, every worker sends one
request to every server and waits for the answers, as a PS worker pulls parameters.

Run it under Paddle's launcher in PS mode (`--server_num S --trainer_num W`), which sets the
roles and endpoints (TRAINING_ROLE, PADDLE_PORT, PADDLE_PSERVERS_IP_PORT_LIST, ...).
  FAULT_ROLE   server | worker: which role misbehaves (default server)
  FAULT_RANK   which rank of that role (default -1: none)
  FAULT_KIND   stop | kill | none: SIGSTOP itself (state T, as `kill -STOP` does), SIGKILL itself
  FAULT_STEP   a server faults after answering this many requests, a worker before this step;
               0: at once, before the rank has logged anything
  STEPS        steps per worker (default 6); STEP_S: seconds of "work" per step (default 0.05)
"""
import os
import signal
import socket
import sys
import time

from fleetbench.measure.timing import log_line

role = "server" if os.environ.get("TRAINING_ROLE") == "PSERVER" else "worker"
servers = os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
workers = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
me = (servers.index(f"{os.environ['POD_IP']}:{os.environ['PADDLE_PORT']}") if role == "server"
      else int(os.environ.get("PADDLE_TRAINER_ID", "0")))
faulty = os.environ.get("FAULT_ROLE", "server") == role and int(os.environ.get("FAULT_RANK", "-1")) == me
steps = int(os.environ.get("STEPS", "6"))
step_s = float(os.environ.get("STEP_S", "0.05"))


def maybe_fault(count):
    if faulty and count == int(os.environ.get("FAULT_STEP", "3")):
        kind = os.environ.get("FAULT_KIND", "none")
        if count:  # at 0 the rank must not have logged anything
            print(f"fault_ps: {role} {me} injects {kind} at {count}", file=sys.stderr, flush=True)
        if kind in ("stop", "kill"):
            os.kill(os.getpid(), signal.SIGSTOP if kind == "stop" else signal.SIGKILL)


def serve():
    host, port = servers[me].rsplit(":", 1)
    listener = socket.create_server((host, int(port)))
    conns = [listener.accept()[0].makefile("rw") for _ in range(workers)]
    answered, open_conns = 0, list(conns)
    while open_conns:
        for conn in list(open_conns):
            line = conn.readline()
            if not line or line.strip() == "bye":
                open_conns.remove(conn)
                continue
            conn.write(line)
            conn.flush()
            answered += 1
            maybe_fault(answered)
    print(f"server {me} done after {answered} requests", flush=True)


def connect(endpoint):
    host, port = endpoint.rsplit(":", 1)
    deadline = time.monotonic() + 60
    while True:
        try:
            return socket.create_connection((host, int(port))).makefile("rw")
        except ConnectionRefusedError:  # the server is not listening yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def work():
    conns = [connect(endpoint) for endpoint in servers]
    for step in range(1, steps + 1):
        maybe_fault(step)
        t0 = time.perf_counter()
        time.sleep(step_s)
        for conn in conns:
            conn.write(f"step {step}\n")
            conn.flush()
        for conn in conns:
            conn.readline()
        cost = time.perf_counter() - t0
        print(log_line(step, steps, 1.0 / step, 8 / cost, "examples/s", cost, 0.0), flush=True)
    for conn in conns:
        conn.write("bye\n")
        conn.flush()


maybe_fault(0)
if role == "server":
    serve()
else:
    work()
