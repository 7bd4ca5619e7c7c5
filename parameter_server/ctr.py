"""CTR-DNN on Criteo through Fleet's parameter server (FleetX's PS CTR benchmark).

    fleetrun --server_num 2 --trainer_num 2 parameter_server/ctr.py --preset tiny
    fleetrun --server_num 2 --worker_num 2 parameter_server/ctr.py --set data.path=/data/criteo
    fleetrun --servers IP1:P1,IP2:P2 --workers IP1:P3,IP2:P4 parameter_server/ctr.py   # per node

26 categorical slots share one sparse embedding table on the servers; 13 dense features;
fc 400-400-400; softmax over click/no click. Figures: examples/s, AUC, log loss.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

from datasets import criteo
from fleetbench.measure import auc
from fleetbench.train import ps
from fleetbench.train.workloads import ctr


@dataclasses.dataclass
class CTRConfig(ctr.CTRSettings, ps.PSConfig):
    pass  # the model, data and batch collective/ctr.py trains too (fleetbench.train.workloads.ctr)


def build(cfg: CTRConfig) -> ps.Workload:
    import paddle
    import paddle.nn.functional as F
    dense = paddle.static.data("dense", [-1, criteo.NUM_DENSE], "float32")
    slots = [paddle.static.data(name, [-1, 1], "int64", lod_level=1) for name in criteo.SLOTS[1:-1]]
    label = paddle.static.data("label", [-1, 1], "int64")
    table = paddle.ParamAttr(name="SparseFeatFactors",
                             initializer=paddle.nn.initializer.Uniform(-0.1, 0.1))
    # embedding(is_sparse=True) works in async and GEO alike (sparse_embedding fails in GEO)
    embedded = [paddle.reshape(paddle.static.nn.embedding(s, [cfg.buckets, cfg.embedding_dim], is_sparse=True,
                                                          param_attr=table), [-1, cfg.embedding_dim])
                for s in slots]
    hidden = paddle.concat(embedded + [dense], axis=1)
    for size in cfg.widths:
        hidden = paddle.static.nn.fc(hidden, size, activation="relu")
    logits = paddle.static.nn.fc(hidden, 2)
    loss = paddle.mean(F.cross_entropy(logits, label))
    _, _, stats = paddle.static.auc(F.softmax(logits), label, num_thresholds=auc.THRESHOLDS)
    return ps.Workload(inputs=[dense, *slots, label], loss=loss, loss_is_logloss=True,
                       optimizer=paddle.optimizer.Adam(cfg.lr), auc_stats=(stats[2], stats[3]),
                       pipe_command=ps.pipe_command("datasets.criteo", "pipe", "--buckets", cfg.buckets))


data_files = ctr.data_files  # the same files for both families (bench/bare_ctr.py reads them here)


if __name__ == "__main__":
    ps.main(__file__, CTRConfig, build, data_files, criteo.first_error)
