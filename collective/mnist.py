"""MNIST on ResNet18/50/101 (paddle.vision.models), data-parallel through Fleet, trained epoch by
epoch with a test-set evaluation after each: convergence beside speed (docs/guide/convergence.md).

    fleetbench data get mnist-5k --out data/mnist-5k        # 5000 real digits, IDX files
    fleetrun --nproc_per_node 2 collective/mnist.py --set data.path=data/mnist-5k
    python collective/mnist.py --preset tiny                 # synthetic digits, seconds

The seeds' setup: Adam with lr 0.01 per device x world size (lr_scaling=linear), batch 128 per
device. Adaptation to 1-channel 28x28 digits: the ResNet's first convolution (7x7, stride 2, three
input channels) is replaced by a 3x3, stride-1 convolution with one input channel, so a digit
reaches the first residual stage at 14x14 (after the unchanged max-pool) instead of 7x7; the rest
of the network and its 10-way classifier are paddle.vision's. `model=lenet` (paddle.vision's LeNet,
made for 28x28 digits) is the tiny model of tests.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses
from typing import Optional

import numpy as np
import paddle
from paddle import nn

import datasets
from datasets import mnist
from fleetbench.measure import config
from fleetbench.train import epochs, evaluate, loop

MODELS = ("resnet18", "resnet50", "resnet101", "lenet")
MEAN, STD = 0.1307 * 255, 0.3081 * 255  # of MNIST's training pixels
LR_SCALING = ("linear", "none")


@dataclasses.dataclass
class MnistConfig(epochs.EpochConfig):
    model: str = "resnet18"
    batch_size: int = 128  # per device
    lr: float = 0.01  # Adam, per device
    # linear: the optimizer's learning rate is lr x world size (the seeds' rule); none: lr as is
    lr_scaling: str = "linear"
    epochs: int = 4  # the seeds ran four epochs of the 60000 digits
    target_accuracy: Optional[float] = 0.95
    warmup_steps: int = 5
    log_every: int = 10
    synthetic_train: int = 4000  # synthetic digits when data.path is unset
    synthetic_test: int = 1000

    def validate(self):
        super().validate()
        config.require(self.model in MODELS, "model", f"must be one of {', '.join(MODELS)}", self.model)
        config.require(self.lr_scaling in LR_SCALING, "lr_scaling", f"must be one of {', '.join(LR_SCALING)}",
                       self.lr_scaling)
        train_examples = len(mnist.load(self.data.path)["train"][1]) if self.data.path else self.synthetic_train
        epochs.check_warmup(self, train_examples // (self.batch_size * epochs.world_size()),
                            f"{train_examples} training digits in batches of {self.batch_size}")


def splits(cfg: MnistConfig) -> dict:
    """{"train"|"test": (images, labels)} of data.path (datasets/mnist.py), else synthetic digits."""
    if cfg.data.path:
        return mnist.load(cfg.data.path)
    return mnist.generate(cfg.synthetic_train, cfg.synthetic_test, cfg.seed)


def network(name: str) -> nn.Layer:
    if name == "lenet":
        return paddle.vision.models.LeNet(num_classes=mnist.NUM_CLASSES)
    model = getattr(paddle.vision.models, name)(num_classes=mnist.NUM_CLASSES)
    model.conv1 = nn.Conv2D(1, 64, kernel_size=3, stride=1, padding=1, bias_attr=False)
    return model


def to_tensors(batch: dict) -> tuple:
    images = (batch["images"].astype(np.float32)[:, None] - MEAN) / STD
    return paddle.to_tensor(images), paddle.to_tensor(batch["labels"].astype(np.int64))


def build(cfg: MnistConfig) -> epochs.EpochWorkload:
    rank, world = paddle.distributed.get_rank(), epochs.world_size()
    data = {split: {"images": images, "labels": labels} for split, (images, labels) in splits(cfg).items()}
    model = network(cfg.model)
    lr = cfg.lr * world if cfg.lr_scaling == "linear" else cfg.lr
    cross_entropy = nn.CrossEntropyLoss()
    return epochs.EpochWorkload(
        model=model, optimizer=paddle.optimizer.Adam(learning_rate=lr, parameters=model.parameters()),
        batches=datasets.Batches(data["train"], cfg.batch_size, rank, world, cfg.seed, cfg.data.path,
                                 convert=to_tensors),
        held_out=evaluate.HeldOut(data["test"], cfg.eval_batch_size, rank, world, convert=to_tensors),
        num_classes=mnist.NUM_CLASSES, lr=lr,
        loss_fn=lambda net, batch: cross_entropy(net(batch[0]), batch[1]))


if __name__ == "__main__":
    loop.main(__file__, MnistConfig, build)
