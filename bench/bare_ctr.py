"""A bare hand-written Fleet parameter-server CTR job: the yardstick for fleetbench's PS overhead.

Same model (parameter_server/ctr.py's build), data files, data pipe, dataset, thread counts and
train_from_dataset as `fleetbench`'s CTR job, with none of the suite's machinery: no per-batch
meter, no log lines, no gloo, no record. Run under the launcher with 1 worker; the worker prints
`BARE_RESULT <examples/s> omp <threads>`: every line of its files times passes / the wall time of
the train_from_dataset calls (warm-up batches included; bench/ps_overhead.py says how much that is).

    fleetrun --server_num 1 --trainer_num 1 bench/bare_ctr.py PRESET [KEY=VALUE ...]
"""
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetbench.measure import config  # noqa: E402  (only to read the same preset; no paddle)
from parameter_server import ctr  # noqa: E402  (the same model; imports no paddle)

cfg = config.build("ctr", ctr.CTRConfig, sys.argv[1], sys.argv[2:])
files = [str(f.absolute()) for f in ctr.data_files(cfg)]
SERVER = (os.environ.get("TRAINING_ROLE") or os.environ.get("PADDLE_ROLE")) == "PSERVER"
# fleetbench's thread rule for one worker (fleetbench.train.ps.roles.set_threads): servers wait on
# the network, the worker's dataset threads share the cores; set before paddle starts
cores = len(os.sched_getaffinity(0))
os.environ["OMP_NUM_THREADS"] = "1" if SERVER else str(max(1, cores // cfg.data.num_workers))
os.environ.setdefault("GLOG_minloglevel", "1")

import paddle  # noqa: E402
from paddle.distributed import fleet  # noqa: E402

paddle.enable_static()
fleet.init()
with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
    paddle.seed(cfg.seed)
    work = ctr.build(cfg)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    fleet.distributed_optimizer(work.optimizer, strategy).minimize(work.loss)
    startup = paddle.static.default_startup_program()
if SERVER:
    fleet.init_server()
    fleet.run_server()
    sys.exit(0)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
fleet.init_worker()
dataset = paddle.distributed.InMemoryDataset()
dataset.init(batch_size=cfg.batch_size, thread_num=cfg.data.num_workers, use_var=work.inputs,
             pipe_command=work.pipe_command)
dataset.set_filelist(files)
dataset.load_into_memory()
rows = dataset.get_memory_data_size()
start = time.perf_counter()
for _ in range(cfg.passes):
    exe.train_from_dataset(program=work.loss.block.program, dataset=dataset, thread=cfg.data.num_workers)
elapsed = time.perf_counter() - start
print(f"BARE_RESULT {rows * cfg.passes / elapsed:.4f} omp {os.environ['OMP_NUM_THREADS']}", flush=True)
fleet.stop_worker()
fleet.fleet._runtime_handle._worker.stop_server()  # fleet.stop_worker never tells the servers
