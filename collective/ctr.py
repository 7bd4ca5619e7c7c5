"""CTR-DNN on Criteo trained data-parallel over all-reduce: parameter_server/ctr.py's model, data
and batch with the embedding table replicated on every rank instead of held by servers.

    fleetrun --nproc_per_node 2 collective/ctr.py --preset tiny          # CPU, gloo
    fleetrun --gpus 0,1,2,3 collective/ctr.py --set data.path=/data/criteo  # GPUs, NCCL

26 categorical slots share one embedding table (buckets x embedding_dim), 13 dense features,
fc 400-400-400, softmax over click/no click, Adam. The presets are the PS script's (one
fleetbench/presets/ctr.yaml): the same data files, read whole by rank r as PS worker r reads them
(every world_size-th file), in file order, in batches of batch_size per rank, for `passes`
passes. Figures: examples/s, and AUC and log loss defined as the PS run's (fleetbench.train.workloads.ctr).

sparse_grad=true (default): nn.Embedding(sparse=True); Paddle's DataParallel then all-gathers the
rows each rank touched and their gradients (verified on 2.6.2 to equal the dense all-reduce's
average) instead of all-reducing the whole table; false: the table's gradient is dense and the
whole table is all-reduced every step. docs/guide/allreduce_vs_ps.md has the bytes.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import paddle
import paddle.distributed as dist
from paddle import nn

from datasets import criteo
from fleetbench.measure import config
from fleetbench.train import loop
from fleetbench.train.workloads import ctr
from fleetbench.train.ps.data import shard

# Methods that all-reduce dense buckets after backward: Paddle's bucketing refuses a sparse
# (SelectedRows) gradient ("Now, it doesn't support sparse parameters").
DENSE_ONLY_METHODS = ("bsp", "fp16_allreduce")


@dataclasses.dataclass
class CTRAllReduceConfig(ctr.CTRSettings, config.CollectiveConfig):
    passes: int = 1  # passes over each rank's files; the run's steps follow from the data
    steps: int = 0  # derived: passes x the batches of the rank with the fewest examples
    sparse_grad: bool = True  # the table's gradient: sparse rows (all-gathered) or dense (all-reduced)

    def check_length(self) -> None:
        config.require(self.steps == 0, "steps", "is derived from passes for ctr (passes x batches per "
                       "rank); set passes instead", self.steps)
        config.require(self.passes >= 1, "passes", "must be >= 1", self.passes)

    def validate(self) -> None:
        super().validate()
        config.require(not (self.sparse_grad and self.method in DENSE_ONLY_METHODS), "method",
                       f"cannot carry the table's sparse gradient (Paddle's post-backward buckets are dense); "
                       f"use mgwfbp, wfbp or grad_merge, or sparse_grad=false", self.method)
        # paddle/amp/grad_scaler.py (2.6.2, 3.3.1) unscales dense gradients only: a SelectedRows one
        # would go to the optimizer still multiplied by the loss scale (read, untested here: no GPU).
        config.require(not (self.sparse_grad and self.amp == "fp16"), "amp",
                       "fp16 needs sparse_grad=false (GradScaler cannot unscale a sparse gradient)", self.amp)


class CTRDNN(nn.Layer):
    def __init__(self, cfg: CTRAllReduceConfig):
        super().__init__()
        self.dim = cfg.embedding_dim
        self.embedding = nn.Embedding(cfg.buckets, cfg.embedding_dim, sparse=cfg.sparse_grad,
                                      weight_attr=paddle.ParamAttr(initializer=nn.initializer.Uniform(-0.1, 0.1)))
        layers, width = [], criteo.NUM_SPARSE * cfg.embedding_dim + criteo.NUM_DENSE
        for size in cfg.widths:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.mlp = nn.Sequential(*layers, nn.Linear(width, 2))

    def forward(self, dense, ids):
        embedded = self.embedding(ids).reshape([-1, criteo.NUM_SPARSE * self.dim])
        return self.mlp(paddle.concat([embedded, dense], axis=1))


def to_tensors(batch: dict) -> tuple:
    return (paddle.to_tensor(batch["dense"]), paddle.to_tensor(batch["ids"]),
            paddle.to_tensor(batch["label"][:, None]))


def fewest(value: int) -> int:
    """The smallest `value` of all ranks (every rank calls this together)."""
    if dist.get_world_size() == 1:
        return value
    tensor = paddle.to_tensor([value], dtype="int64")
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor)


def read_share(cfg: CTRAllReduceConfig) -> tuple:
    """This rank's examples, their valid/invalid line counts, and the batches per pass every rank
    runs (the fewest any rank has). Every rank learns whether any failed (a rank failing alone
    would leave the others waiting in a collective): ValueError on all of them."""
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        files = shard(ctr.data_files(cfg), rank, world)
        if not files:
            raise ValueError("no data file for this rank: each rank reads whole files, so there must be "
                             "at least as many files as ranks")
        arrays, counts = ctr.read_examples(files, cfg.buckets, cfg.data.strict)
        batches, problem = len(arrays["label"]) // cfg.batch_size, None
    except (ValueError, OSError) as err:
        batches, problem = -1, str(err)
    per_pass = fewest(batches)
    if per_pass <= 0:
        raise ValueError(problem or f"a rank has fewer examples than one batch of {cfg.batch_size}, or failed "
                                    f"to read its files (see its log)")
    return arrays, counts, per_pass


def build(cfg: CTRAllReduceConfig) -> loop.Workload:
    arrays, counts, per_pass = read_share(cfg)
    if cfg.method == "grad_merge":
        per_pass -= per_pass % cfg.grad_merge_steps  # whole accumulation cycles (methods.check)
    steps = cfg.passes * per_pass
    if steps <= cfg.warmup_steps:
        raise ValueError(f"warm-up ({cfg.warmup_steps} steps) uses all {steps} steps of {cfg.passes} pass(es); "
                         f"lower warmup_steps, add passes or data")
    model = CTRDNN(cfg)
    quality = ctr.Progressive(cfg.warmup_steps)

    def loss_fn(net, batch):
        dense, ids, label = batch
        logits = net(dense, ids)
        loss = nn.functional.cross_entropy(logits, label)
        quality.observe(logits, label, loss)
        return loss

    def finish(comm) -> dict:
        valid, invalid = comm.sum([counts["valid"], counts["invalid"]])
        return dict(quality.metrics(comm), valid_lines=int(valid), invalid_lines=int(invalid), passes=cfg.passes,
                    **embedding_traffic(cfg))

    # lazy_mode: Adam updates only the rows a sparse gradient holds, as the servers' sparse Adam rule
    optimizer = paddle.optimizer.Adam(cfg.lr, parameters=model.parameters(), lazy_mode=True)
    return loop.Workload(model=model, optimizer=optimizer, loss_fn=loss_fn, steps=steps, finish=finish,
                         batches=ctr.InOrder(arrays, cfg.batch_size, per_pass, to_tensors))


def embedding_traffic(cfg: CTRAllReduceConfig) -> dict:
    """The table's gradient per rank per step: the whole table (dense), or one row (id + values)
    per lookup, which Paddle's DataParallel all-gathers without merging duplicates (sparse)."""
    table = cfg.buckets * cfg.embedding_dim * 4
    rows = cfg.batch_size * criteo.NUM_SPARSE
    sent = rows * (cfg.embedding_dim * 4 + 8) if cfg.sparse_grad else table
    return {"table_bytes": table, "embedding_grad_bytes_per_step": sent}


if __name__ == "__main__":
    loop.main(__file__, CTRAllReduceConfig, build)
