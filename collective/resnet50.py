"""ResNet50 data-parallel training through Fleet collective mode.

    fleetrun --nproc_per_node 2 collective/resnet50.py --preset tiny     # CPU, gloo
    fleetrun --gpus 0,1,2,3,4,5,6,7 collective/resnet50.py               # GPUs, NCCL
Data: synthetic in memory, or `--set data.path=DIR` for an ImageNet-style folder (datasets/images.py).
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import paddle

from fleetbench.train import loop
from fleetbench.train.workloads import images


@dataclasses.dataclass
class ResNet50Config(images.ImageConfig):
    pass  # FleetX's setup is ImageConfig's defaults: 224x224, batch 32 per device, fp32, momentum SGD


def build(cfg: ResNet50Config) -> loop.Workload:
    model = paddle.vision.models.resnet50(num_classes=cfg.num_classes)
    optimizer = paddle.optimizer.Momentum(learning_rate=cfg.lr, momentum=cfg.momentum,
                                          weight_decay=cfg.weight_decay, parameters=model.parameters())
    return images.workload(cfg, model, optimizer)


if __name__ == "__main__":
    loop.main(__file__, ResNet50Config, build)
