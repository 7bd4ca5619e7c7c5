"""Paddle 2.6.2's parameter server as the driver needs it: the workarounds, private calls and
quieting, each with the reason it exists (evidence in docs/guide/ps.md). Paddle is imported inside
functions: a process sets its threads for its role before paddle starts."""
from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # numpy too would read OMP_NUM_THREADS at import: imported inside functions
    import numpy as np

    from fleetbench.train.ps.config import PSConfig

OUT = sys.stdout  # captured at import, before any redirect


def say(text: str) -> None:
    """A line of ours in the rank's log (Quiet swallows Paddle's prints, never these)."""
    print(text, file=OUT, flush=True)


class Quiet:
    """Swallow Paddle's plain print()s (table configs, program ids) and its warnings; they are
    replayed on stderr if the wrapped block fails. Our own lines go to the real stdout."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()

    def __enter__(self) -> Quiet:
        import warnings
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(self.buffer))
        self._stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self._stack.close()
        if kind is not None:
            sys.stderr.write(self.buffer.getvalue())
        return False


@contextlib.contextmanager
def init_deadline(seconds: float) -> Iterator[None]:
    """Leave the process (exit 1) if the block has not ended after `seconds`, with every thread's
    stack in the log, headed `Timeout (H:MM:SS)!` (fleetbench.job.messages, family "PS start-up deadline").

    Paddle 2.6.2's start-up barrier can deadlock. BarrierTable::Barrier on each server adds the
    arriving trainer to a set and waits until the set is emptied; the last trainer to arrive
    empties it and wakes the others. A woken waiter must still get the lock back, and if a trainer
    it released reaches the *next* barrier first, the set is not empty when the waiter looks: it
    sleeps on, its trainer never reaches that next barrier, and so that barrier never fills. GEO's init_params
    runs one such barrier per sparse table back to back (word2vec: emb, emb_w, emb_b); every rank
    waits, silent (docs/guide/ps.md#geo-start-up-deadlock). The waiting call holds the GIL, so no Python
    thread could act: faulthandler's watchdog is C, and dumps the stacks and exits without it."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=OUT)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def quiet_environment() -> None:
    """Before paddle starts: no glog INFO lines (users can still set their own level), and gloo
    on for the worker barriers even under the legacy launcher, which leaves it off by default."""
    os.environ.setdefault("GLOG_minloglevel", "1")
    if os.environ.get("PADDLE_WITH_GLOO", "0") == "0" and os.environ.get("PADDLE_GLOO_HTTP_ENDPOINT"):
        os.environ["PADDLE_WITH_GLOO"] = "1"


def rendezvous_to_wait_for(role: str, servers: list, env: Mapping[str, str]) -> Optional[str]:
    """The gloo HTTP store this process must wait for before fleet.init, or None. Under gloo's HTTP
    rendezvous server 0 starts Paddle's KV server while every other role, in fleet.init, checks
    it (role_maker's wait_server_ready) and, finding it not yet up, sleeps 3 s before it looks
    again: 23 of the 28 CTR runs of a quiet demo lost those seconds (workerlog: `server not
    ready, wait 3 sec to retry`, the store's endpoint named). Polled first at 0.1 s
    (gloo.wait_ports), Paddle's own check finds it up."""
    endpoint = env.get("PADDLE_GLOO_HTTP_ENDPOINT", "")
    if env.get("PADDLE_GLOO_RENDEZVOUS") != "3" or not endpoint or env.get("PADDLE_WITH_GLOO", "0") == "0":
        return None
    me = f"{env.get('POD_IP', '')}:{env.get('PADDLE_PORT', '')}"
    if role == "server" and servers and servers[0] == me:
        return None  # server 0 starts the store
    return endpoint


def import_http_server_in(directory: Path) -> None:
    """With gloo's HTTP rendezvous (the legacy launcher; see quiet_environment) server 0 runs
    Paddle's KV server (role_maker: `_is_server() and _server_index() == 0`), whose module opens
    `http.log` in the current directory when imported (a logging.FileHandler, which keeps the
    absolute path). Import it first from `directory` and drop that handler, so nothing lands in
    the user's directory; the log only lists the rendezvous' HTTP requests."""
    import logging
    with contextlib.chdir(directory):
        from paddle.distributed.fleet.utils import http_server
    logger = logging.getLogger(http_server.__name__)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.addHandler(logging.NullHandler())


def sparse_tables(program: Any) -> list:
    """Names of the parameters looked up with is_sparse=True (they become server sparse tables)."""
    return sorted({op.input("W")[0] for op in program.global_block().ops
                   if op.type in ("lookup_table", "lookup_table_v2") and op.attr("is_sparse")})


def checked_state(program: Any, startup: Any, mode: str) -> list[str]:
    """What a worker trains with whose start-up values come through the servers or must survive
    them: every variable the startup program initialises (the dense parameters, which worker 0
    pushes and every worker pulls back: TheOnePSRuntime._init_worker; the learning rate; the local
    optimizer's state), and in GEO the sparse tables too, which each worker keeps and looks up
    locally (GeoCommunicator::InitSparse). An async worker's sparse tables live on the servers only."""
    sparse = set(sparse_tables(program))
    return sorted(v.name for v in startup.list_vars()
                  if v.persistable and (mode == "geo" or v.name not in sparse))


def digests(names: list[str]) -> list[float]:
    """(sum, sum of squares) in float64 of each named variable as this process's scope holds it,
    flat: two processes holding the same bytes get the same figures, bit for bit."""
    import numpy as np
    import paddle
    scope, out = paddle.static.global_scope(), []
    for name in names:
        values = np.asarray(scope.find_var(name).get_tensor(), dtype="float64")
        out += [float(values.sum()), float(np.square(values).sum())]
    return out


def strategy_for(cfg: PSConfig, optimizer: Any, program: Any) -> Any:
    import paddle
    from paddle.distributed import fleet
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    if cfg.mode == "geo":
        strategy.a_sync_configs = {"k_steps": cfg.k_steps}
    elif isinstance(optimizer, paddle.optimizer.SGD):
        # Paddle 2.6.2 gives SGD's sparse tables the Adam rule (Accessor._set falls into an
        # `else` after its `sgd` branch); name the plain SGD rule so the servers run SGD.
        for name in sparse_tables(program):
            table = strategy.sparse_table_configs.add()
            table.table_name = name
            table.accessor.embed_sgd_param.name = "SparseNaiveSGDRule"
            table.accessor.embedx_sgd_param.name = "SparseNaiveSGDRule"
    return strategy


def train_pass(exe: Any, program: Any, dataset: Any, threads: int, workdir: Path) -> None:
    """One pass of exe.train_from_dataset run from `workdir`: Paddle 2.6.2 writes its trainer
    description to `<id(program)>_train_desc.prototxt` (and `fleet_desc.prototxt`) in the current
    directory on every call (Executor._dump_debug_info, unconditionally). The dataset's files are
    absolute paths (data.check_names), so the directory they are read from does not matter."""
    with contextlib.chdir(workdir):
        exe.train_from_dataset(program=program, dataset=dataset, thread=threads)


def stop_servers() -> None:
    """fleet.stop_worker only finalizes this worker's client; the servers are told to stop only by
    the runtime's private worker handle (what Paddle's own tests call)."""
    from paddle.distributed import fleet
    fleet.fleet._runtime_handle._worker.stop_server()


def sparse_table_rows(name: str, workdir: Path) -> np.ndarray:
    """Every row of the servers' sparse table for parameter `name` (row i = id i), pulled to this
    worker: Paddle's client pulls ids 0..rows-1 from every server and writes one tensor file
    (DistFleetWrapper.recv_and_save_model, what fleet's inference save uses for such tables),
    read back here. Observed on 2.6.2: all 1002 rows of a 2-server table, trained values."""
    import numpy as np
    from paddle.base import core
    from paddle.distributed import fleet
    runtime = fleet.fleet._runtime_handle
    table = {ctx.origin_varnames()[0]: ctx.table_id() for ctx in runtime._send_ctx.values() if ctx.is_sparse()}
    if f"{name}@GRAD" not in table:
        raise ValueError(f"no sparse table for parameter {name!r} (tables: {sorted(table)})")
    runtime._worker.recv_and_save_model(table[f"{name}@GRAD"], str(workdir))
    tensor = core.LoDTensor()
    core.load_lod_tensor(tensor, os.path.join(workdir, name))
    return np.array(tensor)
