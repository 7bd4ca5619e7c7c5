"""A bare hand-written Paddle data-parallel ResNet50 loop: the yardstick for fleetbench's overhead.

Same model, data, optimizer and timing definition as collective/resnet50.py, with none of the
suite's machinery. Run under the launcher; rank 0 prints `BARE_RESULT <images/s>`.
"""
import os
import sys
import time

os.environ["OMP_NUM_THREADS"] = sys.argv[sys.argv.index("--threads") + 1]

import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
from paddle.distributed import fleet  # noqa: E402

from datasets.images import synthetic_batches  # noqa: E402


def arg(name, cast):
    return cast(sys.argv[sys.argv.index(name) + 1])


size, batch, classes = arg("--image_size", int), arg("--batch_size", int), arg("--num_classes", int)
warmup, steps, lr = arg("--warmup_steps", int), arg("--steps", int), arg("--lr", float)
world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
paddle.seed(2021)
if world > 1:
    strategy = fleet.DistributedStrategy()
    strategy.fuse_grad_size_in_MB = 25
    fleet.init(is_collective=True, strategy=strategy)
model = paddle.vision.models.resnet50(num_classes=classes)
opt = paddle.optimizer.Momentum(learning_rate=lr, momentum=0.9, weight_decay=1e-4, parameters=model.parameters())
if world > 1:
    model, opt = fleet.distributed_model(model), fleet.distributed_optimizer(opt)
data = synthetic_batches(8, batch, size, classes, "NCHW", 2021, dist.get_rank(), noise=1.0)
loss_fn = paddle.nn.CrossEntropyLoss()
model.train()
for step in range(1, steps + 1):
    x, y = data[step % len(data)]
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    opt.clear_grad()
    if step == warmup:
        float(loss)
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
float(loss)
elapsed = paddle.to_tensor([time.perf_counter() - start], dtype="float64")
if world > 1:
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0:
    print(f"BARE_RESULT {batch * world * (steps - warmup) / float(elapsed):.4f}", flush=True)
