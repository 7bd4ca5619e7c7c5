"""The third held-out set's models as `layers` definitions (fleetbench/perfmodel/modeldef.py), one row a
trainable tensor in forward order, each written from the example's architecture and configuration
at DeepLearningExamples 729963dd (nvidia_dle_cnn_translation.py's docstring gives each count and where the
stated one comes from).

A row's `flops` is its share of the model's multiply-adds a sample (images) or a token (text), in
modeldef's matmul-parameter units: a convolution's weights x the positions of its output, a dense
layer's weights once; batch-norm and layer-norm scales and biases, biases and embedding look-ups
cost nothing comparable (0). Why it matters: backward makes the last layers' large gradients ready
first and spends most of its time in the early, wide-image layers, which modeldef's default (FLOPs
proportional to parameters) would invert for a CNN.
"""
from __future__ import annotations

import math


def _row(name: str, params: int, flops: int = 0) -> dict:
    return {"name": name, "params": int(params), "flops": int(flops)}


def _conv(name: str, k: int, c_in: int, c_out: int, hw: int, groups: int = 1) -> dict:
    return _row(name, k * k * (c_in // groups) * c_out, k * k * (c_in // groups) * c_out * hw * hw)


def _bn(name: str, c: int) -> list[dict]:
    return [_row(f"{name}.gamma", c), _row(f"{name}.beta", c)]


def _dense(name: str, c_in: int, c_out: int) -> list[dict]:
    return [_row(f"{name}.weight", c_in * c_out, c_in * c_out), _row(f"{name}.bias", c_out)]


# ResNeXt101-32x4d and SE-ResNeXt101-32x4d ------------------------------------------------------

def resnext(classes: int = 1000, se: str | None = None, image: int = 224, layers=(3, 4, 23, 3),
            widths=(128, 256, 512, 1024), expansion: int = 2, cardinality: int = 32) -> dict:
    """PyTorch image_classification/models/resnet.py (TF1's model/resnet.py builds the same
    tensors): a 7x7 stem, bottlenecks with the stride on the grouped 3x3 (v1.5), a projection
    shortcut on each stage's first block, no conv biases. `se`: None; "16" for PyTorch's
    SqueezeAndExcitation(C, 16) (a fixed 16-unit squeeze); "c/16" for TF1's dense C // 16."""
    hw = image // 2
    rows = [_conv("stem.conv", 7, 3, 64, hw), *_bn("stem.bn", 64)]
    hw, c_in = hw // 2, 64  # the 3x3 max-pool
    for stage, (blocks, width) in enumerate(zip(layers, widths)):
        c_out = width * expansion
        for b in range(blocks):
            name, stride = f"layer{stage + 1}.{b}", 2 if stage and not b else 1
            out_hw = hw // stride
            rows += [_conv(f"{name}.conv1", 1, c_in, width, hw), *_bn(f"{name}.bn1", width),
                     _conv(f"{name}.conv2", 3, width, width, out_hw, cardinality), *_bn(f"{name}.bn2", width),
                     _conv(f"{name}.conv3", 1, width, c_out, out_hw), *_bn(f"{name}.bn3", c_out)]
            if b == 0:
                rows += [_conv(f"{name}.downsample", 1, c_in, c_out, out_hw), *_bn(f"{name}.downsample.bn", c_out)]
            if se:
                squeeze = 16 if se == "16" else c_out // 16
                rows += _dense(f"{name}.se.squeeze", c_out, squeeze) + _dense(f"{name}.se.expand", squeeze, c_out)
            c_in, hw = c_out, out_hw
    return {"kind": "layers", "layers": rows + _dense("fc", c_in, classes)}


# EfficientNet v1 (B0, B4, widese) and v2-S ---------------------------------------------------------

EFFNET_B0 = {"kernel": (3, 3, 5, 3, 5, 5, 3), "stride": (1, 2, 2, 2, 1, 2, 1), "repeat": (1, 2, 2, 3, 3, 4, 1),
             "expansion": (1, 6, 6, 6, 6, 6, 6), "channels": (16, 24, 40, 80, 112, 192, 320)}


def _round_filters(c: int, width: float, divisor: int = 8) -> int:
    """EffNetArch._scale_width (and TF2's round_filters): to a multiple of 8, never 10% down."""
    c *= width
    rounded = max(divisor, int(c + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * c else rounded


def _mbconv(name: str, k: int, c_in: int, c_out: int, expand: int, hw: int, out_hw: int, *, se_base: int) -> list[dict]:
    """Inverted bottleneck: 1x1 expand (absent at ratio 1), depthwise kxk, squeeze-excitation of
    int(se_base / 4) units (dense with biases), 1x1 projection; BN after each conv."""
    hidden = c_in * expand
    rows = [] if expand == 1 else [_conv(f"{name}.expand", 1, c_in, hidden, hw), *_bn(f"{name}.expand.bn", hidden)]
    squeeze = max(1, int(se_base * 0.25))
    rows += [_conv(f"{name}.depthwise", k, hidden, hidden, out_hw, groups=hidden), *_bn(f"{name}.depthwise.bn", hidden),
             *_dense(f"{name}.se.reduce", hidden, squeeze), *_dense(f"{name}.se.expand", squeeze, hidden),
             _conv(f"{name}.project", 1, hidden, c_out, out_hw), *_bn(f"{name}.project.bn", c_out)]
    return rows


def efficientnet_v1(width: float, depth: float, image: int, widese: bool = False, classes: int = 1000) -> dict:
    """PyTorch image_classification/models/efficientnet.py and TF2 model/efficientnet_model_v1.py:
    B0's stages scaled by width (channels) and depth (repeats, rounded up); widese squeezes from
    the expanded width instead of the block's input."""
    a = EFFNET_B0
    stem, hw = _round_filters(32, width), math.ceil(image / 2)
    rows, c_in = [_conv("stem.conv", 3, 3, stem, hw), *_bn("stem.bn", stem)], stem
    for s, (k, stride, repeat, expand, channels) in enumerate(zip(a["kernel"], a["stride"], a["repeat"],
                                                                  a["expansion"], a["channels"])):
        c_out = _round_filters(channels, width)
        for b in range(math.ceil(repeat * depth)):
            step = stride if b == 0 else 1
            out_hw = math.ceil(hw / step)
            rows += _mbconv(f"layer{s + 1}.{b}", k, c_in, c_out, expand, hw, out_hw,
                            se_base=c_in * expand if widese else c_in)
            c_in, hw = c_out, out_hw
    features = _round_filters(1280, width)
    rows += [_conv("features.conv", 1, c_in, features, hw), *_bn("features.bn", features)]
    return {"kind": "layers", "layers": rows + _dense("classifier.fc", features, classes)}


# (input, output, kernel, repeat, expansion, stride, fused) of config/efficientnet_v2/s_cfg.py; the
# fused blocks have no squeeze-excitation, the depthwise ones se_ratio 0.25
EFFNET_V2_S = ((24, 24, 3, 2, 1, 1, True), (24, 48, 3, 4, 4, 2, True), (48, 64, 3, 4, 4, 2, True),
               (64, 128, 3, 6, 4, 2, False), (128, 160, 3, 9, 6, 1, False), (160, 256, 3, 15, 6, 2, False))


def efficientnet_v2_s(image: int = 300, classes: int = 1000) -> dict:
    """TF2 model/efficientnet_model_v2.py with s_cfg.py: a fused block is a kxk expand (or, at
    ratio 1, a kxk projection) and a 1x1 projection, BN after each; the rest as v1's MBConv."""
    hw = math.ceil(image / 2)
    rows = [_conv("stem.conv", 3, 3, 24, hw), *_bn("stem.bn", 24)]
    for s, (c_first, c_out, k, repeat, expand, stride, fused) in enumerate(EFFNET_V2_S):
        c_in = c_first
        for b in range(repeat):
            name, step = f"stack{s}.{b}", stride if b == 0 else 1
            out_hw = math.ceil(hw / step)
            if not fused:
                rows += _mbconv(name, k, c_in, c_out, expand, hw, out_hw, se_base=c_in)
            elif expand == 1:
                rows += [_conv(f"{name}.project", k, c_in, c_out, out_hw), *_bn(f"{name}.project.bn", c_out)]
            else:
                hidden = c_in * expand
                rows += [_conv(f"{name}.expand", k, c_in, hidden, out_hw), *_bn(f"{name}.expand.bn", hidden),
                         _conv(f"{name}.project", 1, hidden, c_out, out_hw), *_bn(f"{name}.project.bn", c_out)]
            c_in, hw = c_out, out_hw
    rows += [_conv("top.conv", 1, c_in, 1280, hw), *_bn("top.bn", 1280)]
    return {"kind": "layers", "layers": rows + _dense("logits", 1280, classes)}


# Translation: Transformer (big, t2t) and GNMT v2 ---------------------------------------------------

def _layer_norm(name: str, d: int) -> list[dict]:
    return [_row(f"{name}.weight", d), _row(f"{name}.bias", d)]


def _attention(name: str, d: int) -> list[dict]:
    """fairseq/modules/multihead_attention.py as built: q, k, v and out projections, no biases."""
    return [_row(f"{name}.{p}", d * d, d * d) for p in ("q", "k", "v", "out")]


def transformer_big(vocab: int = 33712, d: int = 1024, ffn: int = 4096, layers: int = 6) -> dict:
    """fairseq transformer_wmt_en_de_big_t2t with --share-all-embeddings: one embedding for the
    encoder, the decoder and the output projection (its one tensor first, so its gradient is ready
    last, as the tied tensor's is; the projection's FLOPs ride on the last row); layer norm before
    each sub-layer and after each stack; sinusoidal positions (no parameters)."""
    rows = [_row("embed_tokens (shared, tied output)", vocab * d)]
    ff = lambda n: _dense(f"{n}.fc1", d, ffn) + _dense(f"{n}.fc2", ffn, d)  # noqa: E731
    for i in range(layers):
        n = f"encoder.{i}"
        rows += _layer_norm(f"{n}.ln1", d) + _attention(f"{n}.self_attn", d) + _layer_norm(f"{n}.ln2", d) + ff(n)
    rows += _layer_norm("encoder.layer_norm", d)
    for i in range(layers):
        n = f"decoder.{i}"
        rows += (_layer_norm(f"{n}.self_attn_ln", d) + _attention(f"{n}.self_attn", d)
                 + _layer_norm(f"{n}.encoder_attn_ln", d) + _attention(f"{n}.encoder_attn", d)
                 + _layer_norm(f"{n}.final_ln", d) + ff(n))
    rows += _layer_norm("decoder.layer_norm", d)
    rows[-1] = dict(rows[-1], flops=rows[-1]["flops"] + vocab * d)  # the tied output projection
    return {"kind": "layers", "layers": rows}


def _lstm(name: str, c_in: int, h: int, suffix: str = "") -> list[dict]:
    """torch.nn.LSTM's four tensors a direction: input and hidden weights, two biases."""
    return [_row(f"{name}.weight_ih{suffix}", 4 * h * c_in, 4 * h * c_in),
            _row(f"{name}.weight_hh{suffix}", 4 * h * h, 4 * h * h),
            _row(f"{name}.bias_ih{suffix}", 4 * h), _row(f"{name}.bias_hh{suffix}", 4 * h)]


def gnmt(vocab: int = 32320, h: int = 1024) -> dict:
    """PyTorch seq2seq/models/gnmt.py (4 layers): one embedding shared by encoder and decoder (first,
    ready last); encoder: a bidirectional LSTM, then three (the first takes both directions, 2h);
    decoder: an LSTM feeding normalized Bahdanau attention (q and k projections, v, a scalar and a
    bias), three LSTMs fed the output and the context (2h), a classifier with its bias."""
    rows = [_row("embedder (shared)", vocab * h)]
    rows += _lstm("encoder.0", h, h) + _lstm("encoder.0", h, h, "_reverse") + _lstm("encoder.1", 2 * h, h)
    rows += _lstm("encoder.2", h, h) + _lstm("encoder.3", h, h)
    rows += _lstm("decoder.att_rnn", h, h)
    rows += [_row("decoder.attn.linear_att", h), _row("decoder.attn.normalize_scalar", 1),
             _row("decoder.attn.normalize_bias", h), _row("decoder.attn.linear_q", h * h, h * h),
             _row("decoder.attn.linear_k", h * h, h * h)]
    for i in range(3):
        rows += _lstm(f"decoder.{i}", 2 * h, h)
    return {"kind": "layers", "layers": rows + _dense("decoder.classifier", h, vocab)}
