"""ResNet18 on the synthetic image task as both families train it (collective/resnet18.py over
all-reduce, parameter_server/resnet18.py through Fleet's parameter server, dense parameters on the
servers): the settings they share, so one presets file (fleetbench/presets/resnet18.yaml) means
the same model, data, batch and optimizer in both; the network; the optimizer.

The data is datasets/images.py's synthetic task (a fixed random template per class plus Gaussian
noise), made from the same seed per rank, so collective rank r and PS worker r train the same
batches. The optimizer is plain SGD because the parameter server's dense tables apply SGD or Adam
only (Paddle 2.6.2 refuses others: "The dense optimizer in PS is only supported SGD or Adam!"),
and SGD has no state that the two architectures would keep differently. Imports no paddle at
import: the PS script's config is checked before paddle starts.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from fleetbench.measure import config

if TYPE_CHECKING:  # imported when the model is built, after the config was checked
    import paddle

MODELS = {
    "resnet18": "paddle.vision.models.resnet18",
    "cnn": "two 3x3 conv + batch-norm + ReLU blocks, global average pool, one linear layer (runs in seconds)",
}


@dataclasses.dataclass
class ResNet18Settings:
    """The seed study's ResNet18 setup (batch 128 per replica) at 224 px; a mixin before the
    family's config. steps counts this rank's/worker's batches, warm-up included."""

    model: str = "resnet18"  # see MODELS
    image_size: int = 224
    num_classes: int = 1000
    batch_size: int = 128
    lr: float = 0.1
    steps: int = 110
    warmup_steps: int = 10
    synthetic_batches: int = 8  # distinct batches per rank, cycled
    synthetic_noise: float = 1.0  # noise scale around each class template (template scale is 1)
    # one trainer thread per PS worker (a second would train its own batches at once, Hogwild)
    data: config.DataConfig = dataclasses.field(default_factory=lambda: config.DataConfig(num_workers=1))

    def validate(self) -> None:
        super().validate()
        config.require(self.model in MODELS, "model", f"must be one of {', '.join(MODELS)}", self.model)
        config.require(self.image_size >= 8, "image_size", "must be >= 8", self.image_size)
        config.require(self.num_classes >= 2, "num_classes", "must be >= 2", self.num_classes)
        config.require(self.synthetic_batches >= 1, "synthetic_batches", "must be >= 1", self.synthetic_batches)
        config.require(self.steps > self.warmup_steps, "steps", f"must be > warmup_steps ({self.warmup_steps})",
                       self.steps)
        config.require(self.data.path is None, "data.path", "must be unset: resnet18 trains on the synthetic "
                       "image task in both families (the parameter server has no image-folder reader); "
                       "collective/resnet50.py and vgg16.py read folders", self.data.path)


def network(cfg: ResNet18Settings) -> paddle.nn.Layer:
    """The model, NCHW; works in dygraph (collective) and static graph (parameter server)."""
    import paddle
    from paddle import nn
    if cfg.model == "resnet18":
        return paddle.vision.models.resnet18(num_classes=cfg.num_classes)

    def block(channels_in: int, channels_out: int) -> list[paddle.nn.Layer]:
        return [nn.Conv2D(channels_in, channels_out, 3, padding=1), nn.BatchNorm2D(channels_out), nn.ReLU()]

    return nn.Sequential(*block(3, 16), nn.MaxPool2D(2), *block(16, 32), nn.AdaptiveAvgPool2D(1), nn.Flatten(),
                         nn.Linear(32, cfg.num_classes))


def optimizer(cfg: ResNet18Settings, parameters: list | None = None) -> paddle.optimizer.SGD:
    """Plain SGD (see the module docstring); parameters None in the static graph."""
    import paddle
    return paddle.optimizer.SGD(learning_rate=cfg.lr, parameters=parameters)
