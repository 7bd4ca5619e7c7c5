"""Run under `fleetrun --nproc_per_node 2`: does Paddle's DataParallel synchronise a sparse
embedding gradient (nn.Embedding(sparse=True)) to the dense all-reduce's average? Each rank looks
up different ids, the loss is weighted by rank + 1, and the same model is trained once with a dense
and once with a sparse table from the same weights. Prints one line per rank:
`SPARSE rank R rows N max_diff D` (rows: rows the synchronised sparse gradient holds)."""
import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed import fleet

fleet.init(is_collective=True)
rank = dist.get_rank()


class Model(paddle.nn.Layer):
    def __init__(self, sparse):
        super().__init__()
        self.embedding = paddle.nn.Embedding(10, 3, sparse=sparse)
        self.linear = paddle.nn.Linear(3, 1)

    def forward(self, ids):
        return self.linear(self.embedding(ids).sum(1))


paddle.seed(1)
dense, sparse = Model(False), Model(True)
sparse.set_state_dict(dense.state_dict())
ids = paddle.to_tensor(np.array([[rank, 5], [rank + 2, 7]], dtype="int64"))
grads = {}
for name, model in (("dense", dense), ("sparse", sparse)):
    wrapped = paddle.DataParallel(model)  # kept alive: its reducer's hooks run during backward
    (wrapped(ids) * (rank + 1)).sum().backward()
    grad = model.embedding.weight.grad
    if grad.is_selected_rows():
        full = np.zeros((10, 3))
        np.add.at(full, np.array(grad.rows()), grad._get_tensor_from_selected_rows().numpy())
        grads[name], rows = full, len(grad.rows())
    else:
        grads[name] = grad.numpy()
print(f"SPARSE rank {rank} rows {rows} max_diff {np.abs(grads['dense'] - grads['sparse']).max():.3g}", flush=True)
