"""BERT pretraining (masked LM + next sentence) data-parallel through Fleet collective mode.

    fleetrun --nproc_per_node 2 collective/bert_large.py --preset tiny [--set data.path=FILE.npz|DIR]
Data format: datasets/bert.py (`fleetbench data gen bert` writes it); without a path, synthetic.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import paddle
from paddle import nn
from paddle.nn import functional as F

from datasets import bert
from fleetbench.measure import config
from fleetbench.train import loop


@dataclasses.dataclass
class BertConfig(config.CollectiveConfig):
    # BERT-Large at sequence length 512, fp32, batch 8 per device (the ddl-benchmarks setting).
    batch_size: int = 8
    lr: float = 1e-4
    weight_decay: float = 0.01
    vocab_size: int = 30522
    hidden_size: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    seq_len: int = 512
    max_predictions: int = 80
    dropout: float = 0.1
    synthetic_batches: int = 8  # distinct global batches held in memory, cycled

    def validate(self):
        super().validate()
        if self.hidden_size % self.num_heads:
            raise config.ConfigError(f"config key 'hidden_size' must be a multiple of num_heads "
                                     f"(got {self.hidden_size})")
        if self.data.path is not None:  # a bad file fails here in one line (a DataError), before training
            bert.load(self.data.path, self.vocab_size, self.seq_len, self.max_predictions)


class MaskedLMHead(nn.Layer):
    def __init__(self, h, vocab_size):
        super().__init__()
        self.transform, self.norm = nn.Linear(h, h), nn.LayerNorm(h)
        self.bias = self.create_parameter([vocab_size], is_bias=True)

    def forward(self, x, word_weight):  # the decoder is tied to the word embedding, as in BERT
        return paddle.matmul(self.norm(F.gelu(self.transform(x))), word_weight, transpose_y=True) + self.bias


class BertPretraining(nn.Layer):
    # Sub-layers are declared in forward order: DataParallel buckets gradients by reversed
    # parameter order, so this order decides which all-reduces can start before backward ends.
    def __init__(self, c: BertConfig):
        super().__init__()
        h = c.hidden_size
        self.word, self.position = nn.Embedding(c.vocab_size, h), nn.Embedding(c.seq_len, h)
        self.segment, self.embed_norm = nn.Embedding(2, h), nn.LayerNorm(h)
        self.dropout = nn.Dropout(c.dropout)
        layer = nn.TransformerEncoderLayer(h, c.num_heads, 4 * h, c.dropout, activation="gelu",
                                           act_dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, c.num_layers)
        self.pooler, self.nsp, self.mlm = nn.Linear(h, h), nn.Linear(h, 2), MaskedLMHead(h, c.vocab_size)

    def forward(self, input_ids, segment_ids, masked_positions):
        batch, seq = input_ids.shape
        x = self.word(input_ids) + self.position(paddle.arange(seq).unsqueeze(0)) + self.segment(segment_ids)
        pad_mask = (input_ids == bert.PAD).astype(x.dtype).unsqueeze([1, 2]) * -1e4  # [B, 1, 1, S]
        h = self.encoder(self.dropout(self.embed_norm(x)), src_mask=pad_mask)
        flat = (masked_positions + paddle.arange(batch).unsqueeze(1) * seq).reshape([-1])
        mlm_logits = self.mlm(paddle.gather(h.reshape([batch * seq, -1]), flat), self.word.weight)
        return mlm_logits, self.nsp(paddle.tanh(self.pooler(h[:, 0])))


def pretraining_loss(model, b):  # masked-LM mean over real predictions + next-sentence mean
    mlm_logits, nsp_logits = model(b["input_ids"], b["segment_ids"], b["masked_positions"])
    mlm = F.cross_entropy(mlm_logits, b["masked_labels"].reshape([-1, 1]), reduction="none").reshape([-1])
    w = b["masked_weights"].reshape([-1])
    return (mlm * w).sum() / w.sum() + F.cross_entropy(nsp_logits, b["next_sentence_labels"][:, None])


def to_tensors(b):  # in the reader's time, not the step's; tokens = non-padding input tokens
    tensors = {k: paddle.to_tensor(v.astype("int64") if v.dtype.kind == "i" else v) for k, v in b.items()}
    return dict(tensors, tokens=int((b["input_ids"] != bert.PAD).sum()))


def build(cfg: BertConfig) -> loop.Workload:
    model = BertPretraining(cfg)
    optimizer = paddle.optimizer.AdamW(cfg.lr, parameters=model.parameters(), weight_decay=cfg.weight_decay)
    rank, world = paddle.distributed.get_rank(), paddle.distributed.get_world_size()
    arrays = bert.source(cfg.data.path, cfg.synthetic_batches * cfg.batch_size * world, cfg.vocab_size,
                         cfg.seq_len, cfg.max_predictions, cfg.seed)
    batches = bert.Batches(arrays, cfg.batch_size, rank, world, cfg.seed, cfg.data.path, convert=to_tensors)
    return loop.Workload(model=model, optimizer=optimizer, batches=batches, loss_fn=pretraining_loss,
                         count=lambda b: (cfg.batch_size, b["tokens"]))


if __name__ == "__main__":
    loop.main(__file__, BertConfig, build)
