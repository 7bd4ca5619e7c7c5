"""VGG16 data-parallel training through Fleet collective mode (paddle.vision.models.vgg16).

    fleetrun --nproc_per_node 2 collective/vgg16.py --preset tiny [--set data.path=IMAGENET_DIR]
Same data paths as ResNet50 (datasets/images.py): synthetic in memory, or an ImageNet-style folder.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import paddle
from paddle import nn

from datasets import images
from fleetbench import config, loop


@dataclasses.dataclass
class VGG16Config(config.CollectiveConfig):
    # FleetX's setup: 224x224, batch 32 per device, fp32, momentum SGD; weight decay of the VGG paper.
    image_size: int = 224
    num_classes: int = 1000
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    # True: the conv layers + global average pool + one linear layer instead of the three fully
    # connected layers (102M of VGG16's 138M parameters); for CPU-sized runs only.
    small_head: bool = False
    synthetic_batches: int = 8  # distinct in-memory batches per rank, cycled
    synthetic_noise: float = 1.0  # noise scale around each class template (template scale is 1)

    def validate(self):
        super().validate()
        if self.data.path is not None:
            try:
                self.num_classes = images.check_image_folder(self.data.path)
            except ValueError as err:
                raise config.ConfigError(str(err)) from None


def vgg16(cfg: VGG16Config) -> nn.Layer:
    if not cfg.small_head:
        return paddle.vision.models.vgg16(num_classes=cfg.num_classes)
    convs = paddle.vision.models.vgg16(num_classes=0, with_pool=False)  # the 13 conv layers only
    return nn.Sequential(convs, nn.AdaptiveAvgPool2D(1), nn.Flatten(), nn.Linear(512, cfg.num_classes))


def build(cfg: VGG16Config) -> loop.Workload:
    model = vgg16(cfg)
    optimizer = paddle.optimizer.Momentum(learning_rate=cfg.lr, momentum=cfg.momentum,
                                          weight_decay=cfg.weight_decay, parameters=model.parameters())
    if cfg.data.path:
        batches = images.folder_loader(cfg.data.path, cfg.batch_size, cfg.image_size, "NCHW",
                                       cfg.data.num_workers, cfg.seed)
    else:
        batches = images.synthetic_batches(cfg.synthetic_batches, cfg.batch_size, cfg.image_size,
                                           cfg.num_classes, "NCHW", cfg.seed, paddle.distributed.get_rank(),
                                           cfg.synthetic_noise)
    cross_entropy = nn.CrossEntropyLoss()
    return loop.Workload(model=model, optimizer=optimizer, batches=batches, unit="images/s",
                         loss_fn=lambda net, batch: cross_entropy(net(batch[0]), batch[1]))


if __name__ == "__main__":
    loop.main("vgg16", VGG16Config, build)
