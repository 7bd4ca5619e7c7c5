"""The parameter counts DeepLearningExamples' own PyTorch model code builds (nvidia_dle_cnn_translation.py's
"stated" counts): run with a Python that has torch (2.13 CPU here), DLE_SRC the checkout of
`git archive 729963dd PyTorch/Classification/ConvNets/image_classification PyTorch/Translation`."""
import argparse
import os
import sys
import types

import torch

SRC = os.environ.get("DLE_SRC", ".")
# CUDA kernels, apex and loggers the examples import; none holds a parameter (apex's FusedLayerNorm
# has LayerNorm's weight and bias)
for name in ("dllogger", "strided_batched_gemm", "apex", "apex.amp", "apex.parallel", "apex.normalization"):
    sys.modules[name] = types.ModuleType(name)
fused = sys.modules["apex.normalization.fused_layer_norm"] = types.ModuleType("apex.normalization.fused_layer_norm")
fused.FusedLayerNorm = torch.nn.LayerNorm


def count(model) -> tuple[int, int]:
    params = [p for p in model.parameters() if p.requires_grad]
    return sum(p.numel() for p in params), len(params)


def convnets():
    sys.path.insert(0, f"{SRC}/PyTorch/Classification/ConvNets")
    from image_classification.models import common, efficientnet, resnet
    for name in ("resnext101_32x4d", "se_resnext101_32x4d"):
        yield name, count(getattr(resnet, name)(pretrained=False))
    for name in ("efficientnet_b0", "efficientnet_b4", "efficientnet_widese_b0", "efficientnet_widese_b4"):
        yield name, count(getattr(efficientnet, name)(pretrained=False))
    # TF1's graph (TensorFlow/Classification/ConvNets/model/resnet.py): 1001 classes, SE of C // 16 units
    yield "tf1 resnext101_32x4d", count(resnet.resnext101_32x4d(pretrained=False, num_classes=1001))
    squeeze = common.SqueezeAndExcitation.__init__
    common.SqueezeAndExcitation.__init__ = lambda self, c, s, act: squeeze(self, c, c // 16, act)
    yield "tf1 se_resnext101_32x4d", count(resnet.se_resnext101_32x4d(pretrained=False, num_classes=1001))


def transformer():
    sys.path.insert(0, f"{SRC}/PyTorch/Translation/Transformer")
    from fairseq.models import transformer as t
    args = argparse.Namespace(share_all_embeddings=True, src_vocab_size=33712, tgt_vocab_size=33712, padding_idx=1,
                              fuse_dropout_add=False, fuse_relu_dropout=False, fuse_layer_norm=True)
    t.transformer_wmt_en_de_big_t2t(args)  # scripts/run_*.sh's --arch
    yield "transformer_wmt_en_de_big_t2t", count(t.TransformerModel.build_model(args))


def gnmt():
    sys.path.insert(0, f"{SRC}/PyTorch/Translation/GNMT")
    from seq2seq.models.gnmt import GNMT
    yield "gnmt (vocab 32320)", count(GNMT(vocab_size=32320))


if __name__ == "__main__":
    for part in (convnets, transformer, gnmt):
        for name, (params, tensors) in part():
            print(f"{name}: {params:,} parameters in {tensors} tensors")
