"""WMT16 en-de Transformer (base/big) data-parallel through Fleet collective mode.

    fleetrun --nproc_per_node 2 collective/transformer.py --preset tiny [--set data.path=DIR]
Data format: datasets/wmt16.py (`fleetbench data gen wmt16` writes it); without a path, synthetic.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import numpy as np
import paddle
from paddle import nn
from paddle.nn import functional as F

from datasets import wmt16
from fleetbench.measure import config
from fleetbench.train import loop


@dataclasses.dataclass
class TransformerConfig(config.CollectiveConfig):
    # Transformer-base as FleetX runs it: 4096 tokens per device, fp32, Adam + Noam schedule.
    batch_size: int = 4096  # the token budget per device: pairs x (longest side + 1) <= this
    lr: float = 2.0  # scale of the Noam schedule
    lr_warmup: int = 4000  # Noam warm-up steps (optimizer schedule, not the benchmark's warmup_steps)
    vocab_size: int = 37000  # shared source/target BPE vocabulary; from vocab.txt when data.path is set
    d_model: int = 512
    num_heads: int = 8
    num_layers: int = 6  # encoder layers = decoder layers
    ffn_size: int = 2048
    dropout: float = 0.1
    label_smoothing: float = 0.1
    max_len: int = 256  # longer pairs are skipped
    synthetic_pairs: int = 4096

    def validate(self):
        super().validate()
        if self.d_model % self.num_heads or self.batch_size <= self.max_len:
            raise config.ConfigError(f"config keys: need d_model % num_heads == 0 and batch_size (tokens) > "
                                     f"max_len (got {self.d_model}, {self.num_heads}, {self.batch_size}, "
                                     f"{self.max_len})")
        if self.data.path is not None:  # a bad directory fails here in one line, before training
            self.vocab_size = wmt16.load(self.data.path, self.max_len)[0]


def sinusoid(length, d):  # the fixed positional encoding of the Transformer paper
    angle = np.arange(length)[:, None] / np.power(10000.0, np.arange(0, d, 2) / d)
    return np.stack([np.sin(angle), np.cos(angle)], -1).reshape(length, d).astype("float32")


class Seq2Seq(nn.Layer):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.scale = c.d_model ** 0.5
        self.embed = nn.Embedding(c.vocab_size, c.d_model)  # shared: source, target and output
        self.register_buffer("positions", paddle.to_tensor(sinusoid(c.max_len + 1, c.d_model)), False)
        self.dropout = nn.Dropout(c.dropout)
        self.transformer = nn.Transformer(c.d_model, c.num_heads, c.num_layers, c.num_layers, c.ffn_size,
                                          c.dropout, normalize_before=True)

    def embed_at(self, ids):
        return self.dropout(self.embed(ids) * self.scale + self.positions[: ids.shape[1]])

    def forward(self, src, tgt_in):
        pad = (src == wmt16.PAD).astype("float32").unsqueeze([1, 2]) * -1e9  # [B, 1, 1, S]
        causal = self.transformer.generate_square_subsequent_mask(tgt_in.shape[1])
        out = self.transformer(self.embed_at(src), self.embed_at(tgt_in), pad, causal, pad)
        return paddle.matmul(out, self.embed.weight, transpose_y=True)


def smoothed_loss(model, b, eps):  # label-smoothed cross entropy per non-padding target token
    # The smoothing term -mean_v log p_v is logsumexp - mean of the logits: no [tokens, vocab]
    # one-hot and no log_softmax (~100x slower than fused cross_entropy on CPU in Paddle 2.6.2).
    logits = model(b["src"], b["tgt_in"])
    nll = F.cross_entropy(logits, b["tgt_out"].unsqueeze(-1), reduction="none").squeeze(-1)
    uniform = paddle.logsumexp(logits, axis=-1) - logits.mean(axis=-1)
    mask = (b["tgt_out"] != wmt16.PAD).astype(nll.dtype)
    return (((1 - eps) * nll + eps * uniform) * mask).sum() / mask.sum()


def to_tensors(b):  # in the reader's time; tokens = target tokens incl. </s>, as FleetX counts
    tokens = int((b["tgt_out"] != wmt16.PAD).sum())
    return dict({k: paddle.to_tensor(v) for k, v in b.items()}, pairs=len(b["src"]), tokens=tokens)


def build(cfg: TransformerConfig) -> loop.Workload:
    model = Seq2Seq(cfg)
    schedule = paddle.optimizer.lr.NoamDecay(cfg.d_model, cfg.lr_warmup, learning_rate=cfg.lr)
    optimizer = paddle.optimizer.Adam(schedule, 0.9, 0.997, 1e-9, parameters=model.parameters())
    pairs = wmt16.source(cfg.data.path, cfg.max_len, cfg.synthetic_pairs, cfg.vocab_size, cfg.seed)
    batches = wmt16.Batches(pairs, cfg.batch_size, paddle.distributed.get_rank(),
                            paddle.distributed.get_world_size(), cfg.seed, cfg.data.path, convert=to_tensors)
    return loop.Workload(model=model, optimizer=optimizer, batches=batches,
                         loss_fn=lambda m, b: smoothed_loss(m, b, cfg.label_smoothing),
                         count=lambda b: (b["pairs"], b["tokens"]))


if __name__ == "__main__":
    loop.main(__file__, TransformerConfig, build)
