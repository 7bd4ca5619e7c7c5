"""ResNet18 (or a small CNN) on the synthetic image task, data-parallel through Fleet collective
mode: the collective half of the ResNet18 pair whose other half is parameter_server/resnet18.py
(same presets file, data, batch, optimizer; fleetbench.train.workloads.resnet18).

    fleetrun --nproc_per_node 2 collective/resnet18.py --preset tiny     # CPU, gloo (small CNN)
    fleetrun --gpus 0,1,2,3 collective/resnet18.py                       # GPUs, NCCL, 224 px
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import paddle

from datasets import images
from fleetbench.measure import config
from fleetbench.train import loop
from fleetbench.train.workloads import resnet18


@dataclasses.dataclass
class ResNet18Config(resnet18.ResNet18Settings, config.CollectiveConfig):
    pass


def build(cfg: ResNet18Config) -> loop.Workload:
    model = resnet18.network(cfg)
    batches = images.synthetic_batches(cfg.synthetic_batches, cfg.batch_size, cfg.image_size, cfg.num_classes,
                                       "NCHW", cfg.seed, paddle.distributed.get_rank(), noise=cfg.synthetic_noise)
    cross_entropy = paddle.nn.CrossEntropyLoss()
    return loop.Workload(model=model, optimizer=resnet18.optimizer(cfg, model.parameters()), batches=batches,
                         loss_fn=lambda net, batch: cross_entropy(net(batch[0]), batch[1]))


if __name__ == "__main__":
    loop.main(__file__, ResNet18Config, build)
