"""VGG16 data-parallel training through Fleet collective mode (paddle.vision.models.vgg16).

    fleetrun --nproc_per_node 2 collective/vgg16.py --preset tiny [--set data.path=IMAGENET_DIR]
Same data paths as ResNet50 (datasets/images.py): synthetic in memory, or an ImageNet-style folder.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import paddle
from paddle import nn

from fleetbench.train import loop
from fleetbench.train.workloads import images


@dataclasses.dataclass
class VGG16Config(images.ImageConfig):
    # FleetX's setup (ImageConfig's defaults) with the VGG paper's learning rate and weight decay.
    lr: float = 0.01
    weight_decay: float = 5e-4
    # True: the conv layers + global average pool + one linear layer instead of the three fully
    # connected layers (102M of VGG16's 138M parameters); for CPU-sized runs only.
    small_head: bool = False


def vgg16(cfg: VGG16Config) -> nn.Layer:
    if not cfg.small_head:
        return paddle.vision.models.vgg16(num_classes=cfg.num_classes)
    convs = paddle.vision.models.vgg16(num_classes=0, with_pool=False)  # the 13 conv layers only
    return nn.Sequential(convs, nn.AdaptiveAvgPool2D(1), nn.Flatten(), nn.Linear(512, cfg.num_classes))


def build(cfg: VGG16Config) -> loop.Workload:
    model = vgg16(cfg)
    optimizer = paddle.optimizer.Momentum(learning_rate=cfg.lr, momentum=cfg.momentum,
                                          weight_decay=cfg.weight_decay, parameters=model.parameters())
    return images.workload(cfg, model, optimizer)


if __name__ == "__main__":
    loop.main(__file__, VGG16Config, build)
