"""The parameter-server family: Fleet PS jobs driven from a script's model, data pipe and optimizer.

A script declares its config (a PSConfig) and `build(cfg) -> Workload` and calls
`ps.main(__file__, ConfigClass, build, data_files, first_error)` under Paddle's launcher:

    roles     TRAINING_ROLE from fleetrun: servers serve tables until told to stop, workers train
    modes     async (a_sync), geo (a_sync + k_steps); sync is refused (config.SYNC_REFUSAL)
    data      Fleet InMemoryDataset/QueueDataset fed by the script's pipe_command, trained with
              exe.train_from_dataset over `data.num_workers` threads; whole files are dealt to
              workers round-robin, so every worker reads a disjoint share
    window    a py_func appended to the program feeds every batch to the meter (its rows, units,
              loss); the first `warmup_steps` batches of each worker are excluded; a worker's
              measured window runs from the end of its last warm-up batch to the end of its last
              batch of the last pass; the job's wall time is the slowest worker's window
    results   reduced over workers by gloo (fleetbench.measure.metrics); worker 0 stores the
              record through the run layer (fleetbench.train.run)
    shutdown  all workers meet at a barrier, then worker 0 tells the servers to stop, so the
              whole job ends by itself under either launcher
    files     nothing in the user's directory or /tmp outlives a process (scratch.py)

Modules: config (PSConfig, Workload), driver (main, the worker's job, reporting), meter (the
per-batch meter), data (sharding, the pipe, synthetic caches, loading), roles (role, placement,
threads), gloo (the workers' collectives, server ports), paddle26 (Paddle 2.6.2 workarounds and
private calls), scratch (the per-process scratch directory), marks (the step's parts: py_func marks
in the worker's program), commthread (the CPU time of the PS client's own threads: communicator, brpc), servers
(the servers' CPU time and probe, as the workers see them), stepparts (the record's step_breakdown).
No module imports paddle at import.
"""
from fleetbench.train.ps.config import PSConfig, Workload
from fleetbench.train.ps.data import pipe_command, synthetic_dir
from fleetbench.train.ps.driver import main, sparse_table_rows

__all__ = ["PSConfig", "Workload", "main", "pipe_command", "synthetic_dir", "sparse_table_rows"]
