"""GPT pretraining (decoder-only, pre-LN; LLaMA's RMSNorm, SwiGLU, rotary, grouped-query attention and
mixture-of-experts MLPs as options) over Fleet's hybrid parallelism: tensor (tp), pipeline (pp),
sharding stages 0-3, sequence parallelism, recompute, expert parallelism (ep) and Paddle's segment
parallelism (sep: its degree and groups only; the model does not yet cut its sequence over them).

    fleetbench launch --nproc_per_node 2 collective/gpt.py --preset tiny [--set sharding_stage=1]
Model: fleetbench/train/workloads/gpt_model.py; the split: fleetbench/train/hybrid.py; data: datasets/text.py
(`fleetbench data gen text` writes a token file; without data.path, a learnable synthetic stream).
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import paddle

from datasets import text
from fleetbench.measure import config
from fleetbench.measure.config import require
from fleetbench.train import hybrid, loop
from fleetbench.train.workloads import gpt_model


@dataclasses.dataclass
class GptConfig(config.CollectiveConfig):
    # GPT-3 XL (1.3B): 24 layers, hidden 2048, 16 heads, sequence 2048 (presets: 6.7b, 13b, llama7b)
    vocab_size: int = 50304
    hidden_size: int = 2048
    num_layers: int = 24
    num_heads: int = 16
    num_kv_heads: int = 0  # K/V heads (grouped-query attention; 1: multi-query); 0: num_heads
    ffn_hidden: int = 0  # 0: 4 x hidden_size
    seq_len: int = 2048
    norm: str = "layernorm"  # layernorm | rmsnorm
    mlp: str = "gelu"  # gelu | swiglu
    position: str = "learned"  # learned | rotary
    num_experts: int = 0  # mixture-of-experts: expert MLPs in each MoE layer (0: dense)
    top_k: int = 2  # experts a token is routed to
    moe_every: int = 1  # every n-th layer holds experts (1: all, as Mixtral; 2: every other, as GShard)
    capacity_factor: float = 0.0  # an expert's slots: factor x tokens x top_k / num_experts (0: unlimited)
    aux_loss_coef: float = 0.01  # weight of the load-balancing loss (Switch's 0.01)
    tp: int = 1
    pp: int = 1
    ep: int = 1  # expert parallel: experts split over ep data-parallel ranks (all-to-all; GPU builds)
    sep: int = 1  # Paddle's segment parallelism (sep_degree): its groups made; GPU builds (module doc)
    sharding_stage: int = 0  # 0: data parallel; 1: optimizer state; 2: + gradients; 3: + weights
    sequence_parallel: bool = False
    recompute: str = "none"  # none | selective | full
    micro_batch: int = 1  # sequences a rank runs at once
    global_batch: int = 0  # sequences a step, all ranks (0: micro_batch x data-parallel width)
    lr: float = 3e-4
    weight_decay: float = 0.01
    synthetic_batches: int = 8  # distinct batches a rank holds in memory, cycled
    dry_topology: bool = False  # print each rank's hybrid groups and stop before fleet.init

    def validate(self):
        super().validate()
        for key, choices in (("norm", ("layernorm", "rmsnorm")), ("mlp", ("gelu", "swiglu")),
                             ("position", ("learned", "rotary")), ("recompute", ("none", "selective", "full"))):
            require(getattr(self, key) in choices, key, f"must be one of {', '.join(choices)}", getattr(self, key))
        require(self.sharding_stage in (0, 1, 2, 3), "sharding_stage", "must be 0, 1, 2 or 3", self.sharding_stage)
        require(self.tp >= 1 and self.num_heads % self.tp == 0, "tp", f"must divide num_heads ({self.num_heads})", self.tp)
        require(self.pp >= 1 and self.num_layers % self.pp == 0, "pp", f"must divide num_layers ({self.num_layers})", self.pp)
        kv = self.num_kv_heads or self.num_heads
        require(self.num_kv_heads >= 0 and self.num_heads % kv == 0, "num_kv_heads",
                f"must divide num_heads ({self.num_heads}): each K/V head serves whole query heads", self.num_kv_heads)
        require(kv % self.tp == 0, "tp", f"must divide num_kv_heads ({kv}): a TP rank holds whole K/V heads",
                self.tp)
        self.validate_experts()
        require(self.sep >= 1 and self.seq_len % self.sep == 0, "sep", f"must divide seq_len ({self.seq_len})",
                self.sep)
        require(self.hidden_size % self.num_heads == 0, "hidden_size", "must be a multiple of num_heads", self.hidden_size)
        require(not self.sequence_parallel or self.tp > 1, "sequence_parallel", "needs tp > 1", self.sequence_parallel)
        if self.sequence_parallel:  # activations [seq_len/tp, b, h] between the TP layers: seq_len must divide
            hybrid.sequence_layout(self.seq_len, self.micro_batch, self.hidden_size, self.tp)
        require(self.micro_batch >= 1, "micro_batch", "must be >= 1", self.micro_batch)
        require(self.global_batch % self.micro_batch == 0, "global_batch", "must be a multiple of micro_batch",
                self.global_batch)
        self.batch_size = self.micro_batch  # what a rank runs at once, as every record names it
        if self.data.path is not None:  # a bad file fails here in one line, before training
            text.load(self.data.path, self.vocab_size, self.seq_len)

    def validate_experts(self):
        require(self.num_experts >= 0, "num_experts", "must be >= 0 (0: dense)", self.num_experts)
        require(self.ep >= 1, "ep", "must be >= 1", self.ep)
        if not self.num_experts:
            require(self.ep == 1, "ep", "needs num_experts > 0 (experts to split)", self.ep)
            return
        require(1 <= self.top_k <= self.num_experts, "top_k", f"must be 1 to num_experts ({self.num_experts})",
                self.top_k)
        require(1 <= self.moe_every <= self.num_layers, "moe_every", f"must be 1 to num_layers ({self.num_layers})",
                self.moe_every)
        require(self.capacity_factor >= 0, "capacity_factor", "must be >= 0 (0: unlimited)", self.capacity_factor)
        require(self.num_experts % self.ep == 0, "ep", f"must divide num_experts ({self.num_experts})", self.ep)
        # tokens a rank routes differ in number per expert: the sequence-parallel gathers need equal pieces
        require(not self.sequence_parallel, "sequence_parallel", "cannot be combined with num_experts > 0",
                self.sequence_parallel)

    def fleet_strategy(self):
        return hybrid.strategy(self)


def data_rank(cfg: GptConfig, world: int) -> int:
    """This rank's index among the ranks that read different data (tp/pp peers read the same)."""
    if world == 1:
        return 0
    hcg = paddle.distributed.fleet.get_hybrid_communicate_group()
    return hcg.get_data_parallel_rank() * hcg.get_sharding_parallel_world_size() + hcg.get_sharding_parallel_rank()


def build(cfg: GptConfig) -> loop.Workload:
    world = paddle.distributed.get_world_size()
    width, rank = hybrid.width(cfg, world), data_rank(cfg, world)
    hybrid.check_experts(cfg, world)
    if cfg.pp == 1 and cfg.global_batch not in (0, cfg.micro_batch * width):
        raise config.ConfigError(f"config key 'global_batch' must be micro_batch x {width} data-parallel ranks "
                                 f"with pp=1 (got {cfg.global_batch}): accumulation runs in the pipeline schedule")
    per_step = cfg.micro_batch * hybrid.accumulation(cfg, world)
    wins = (text.windows(text.load(cfg.data.path, cfg.vocab_size, cfg.seq_len), cfg.seq_len, rank, width)
            if cfg.data.path else text.synthetic(cfg.synthetic_batches * per_step, cfg.seq_len + 1, cfg.vocab_size,
                                                 cfg.seed, rank))
    batches = [{"input": paddle.to_tensor(w[:, :-1]), "labels": paddle.to_tensor(w[:, 1:])}
               for w in (wins[i:i + per_step] for i in range(0, len(wins) - per_step + 1, per_step))]
    model = gpt_model.build(cfg)
    criterion = gpt_model.LanguageModelLoss(cfg)
    optimizer = paddle.optimizer.AdamW(cfg.lr, parameters=model.parameters(), weight_decay=cfg.weight_decay)
    return loop.Workload(model=model, optimizer=optimizer, batches=batches,
                         loss_fn=lambda m, b: criterion(m(b["input"]), b["labels"]),
                         count=lambda b: (per_step, per_step * cfg.seq_len), parallel=hybrid.prepare,
                         utilization=hybrid.utilization(cfg))


if __name__ == "__main__":
    loop.main(__file__, GptConfig, build, checks=(hybrid.check,), before_setup=hybrid.print_topology)
