"""The CTR-DNN task as both families train it (parameter_server/ctr.py through Fleet's parameter
server, collective/ctr.py data-parallel over all-reduce): the settings they share, so one
presets file (fleetbench/presets/ctr.yaml) means the same model, data and batch in both; the data
files; and, for the collective run, reading a rank's files and counting the quality figures the
way the parameter-server run does (AUC buckets and log loss over the measured window,
fleetbench.measure.auc). Imports no paddle at import: the PS script's config is checked first.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from datasets import DataError, criteo
from fleetbench.measure import auc, config
from fleetbench.measure.metrics import Communicator
from fleetbench.train.ps.data import synthetic_dir

if TYPE_CHECKING:  # imported when the collective run starts
    import paddle


@dataclasses.dataclass
class CTRSettings:
    """PaddleRec/FleetX CTR-DNN: 1000001 hashed ids, 9-wide embeddings shared by the 26 slots,
    fc 400-400-400, Adam 1e-4, batch 512 per worker/rank. A mixin before the family's config."""

    buckets: int = 1000001
    embedding_dim: int = 9
    fc_sizes: str = "400,400,400"
    batch_size: int = 512
    lr: float = 0.0001
    warmup_steps: int = 20
    log_every: int = 100
    synthetic_rows: int = 1000000  # used when data.path is unset
    synthetic_files: int = 32

    def validate(self) -> None:
        super().validate()
        config.require(self.buckets >= 2, "buckets", "must be >= 2 (id 0 is padding)", self.buckets)
        config.require(self.embedding_dim >= 1, "embedding_dim", "must be >= 1", self.embedding_dim)
        config.require(all(w.strip().isdigit() and int(w) > 0 for w in self.fc_sizes.split(",")), "fc_sizes",
                       "must be comma-separated widths > 0, e.g. 400,400,400", self.fc_sizes)
        config.require(self.synthetic_files <= self.synthetic_rows, "synthetic_files",
                       f"must be <= synthetic_rows ({self.synthetic_rows})", self.synthetic_files)

    @property
    def widths(self) -> list:
        return [int(w) for w in self.fc_sizes.split(",")]


def data_files(cfg: CTRSettings) -> list:
    """data.path's files, else the synthetic Criteo set of the config (made once per machine)."""
    if cfg.data.path:
        return criteo.list_files(cfg.data.path)
    params = {"rows": cfg.synthetic_rows, "files": cfg.synthetic_files, "seed": cfg.seed}
    key = dict(params, version=criteo.GENERATOR_VERSION)
    return criteo.list_files(synthetic_dir("criteo", key, lambda out: criteo.generate(out, **params)))


# ---------------------------------------------------------------- the collective run's reading
def read_examples(files: list, buckets: int, strict: bool) -> tuple:
    """Every valid line of `files` as arrays {"dense": (n, 13) float32, "ids": (n, 26) int64,
    "label": (n,) int64}, with datasets.criteo's checks and hashing (the pipe's rules), and the
    counts {"valid", "invalid"}. With `strict`, DataError at the first invalid line."""
    import numpy as np
    dense, ids, labels, invalid = [], [], [], 0
    for path in files:
        for number, raw in criteo.iter_lines(path):
            reason = criteo.check_line(raw)
            if reason is not None:
                if strict:
                    raise DataError(f"invalid input line (data.strict): {path}:{number}: {reason}")
                invalid += 1
                continue
            label, values, slots = criteo.features(criteo.strip_terminator(raw), buckets)
            dense.append(values)
            ids.append(slots)
            labels.append(label)
    if not labels:
        raise DataError(f"no valid Criteo line in {', '.join(str(Path(f)) for f in files) or 'no files'}")
    arrays = {"dense": np.asarray(dense, dtype=np.float32), "ids": np.asarray(ids, dtype=np.int64),
              "label": np.asarray(labels, dtype=np.int64)}
    return arrays, {"valid": len(labels), "invalid": invalid}


class InOrder:
    """Re-iterable batches of a rank's examples in file order, `batches` per pass (the parameter
    server's InMemoryDataset does not shuffle either); each batch is converted when it is read,
    so the conversion counts as reader time."""

    def __init__(self, arrays: dict, batch_size: int, batches: int, convert: Callable[[dict], Any]) -> None:
        self.arrays, self.batch_size, self.batches, self.convert = arrays, batch_size, batches, convert

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator:
        for i in range(self.batches):
            rows = slice(i * self.batch_size, (i + 1) * self.batch_size)
            yield self.convert({name: values[rows] for name, values in self.arrays.items()})


class Progressive:
    """The collective run's quality figures, defined as the parameter-server run's: every batch
    is scored before the update it causes (progressive validation), and the measured window's
    predictions are counted into fleetbench.measure.auc buckets and log-loss sums, which all
    ranks add up at the end. The first `warmup_steps` batches are not counted. Counts stay on
    the device (no sync per step) and are read once."""

    def __init__(self, warmup_steps: int) -> None:
        import paddle
        self.warmup_steps, self.seen = warmup_steps, 0
        self.buckets = paddle.zeros([2 * (auc.THRESHOLDS + 1)], dtype="int64")  # negatives, positives
        self.loss_sum = paddle.zeros([1], dtype="float64")
        self.examples = 0

    def observe(self, logits: paddle.Tensor, label: paddle.Tensor, loss: paddle.Tensor) -> None:
        import paddle
        self.seen += 1
        if self.seen <= self.warmup_steps:
            return
        with paddle.no_grad():
            clicked = paddle.nn.functional.softmax(logits)[:, 1]
            bucket = paddle.cast(clicked * auc.THRESHOLDS, "int64")  # int(p x THRESHOLDS), as the auc op
            index = bucket + label.reshape([-1]) * (auc.THRESHOLDS + 1)
            self.buckets += paddle.bincount(index, minlength=2 * (auc.THRESHOLDS + 1))
            self.loss_sum += paddle.cast(loss.detach(), "float64") * label.shape[0]
            self.examples += label.shape[0]

    def metrics(self, comm: Communicator) -> dict:
        """{"auc", "logloss"} over all ranks (every rank calls this together)."""
        counts = comm.sum(self.buckets.numpy().tolist() + [self.loss_sum.item(), self.examples])
        negatives, positives = counts[:auc.THRESHOLDS + 1], counts[auc.THRESHOLDS + 1:-2]
        loss_sum, examples = counts[-2:]
        return {"auc": auc.from_buckets(positives, negatives),
                "logloss": loss_sum / examples if examples else None}
