"""A model outside the registry, from its definition: the float32 bytes of each trainable tensor in
the order backward makes it ready, and the share of backward's FLOPs done by then, for the
overlap model (perfmodel/overlap.py) and the bytes a step all-reduces (perfmodel/published.py).

A record gives `config.model_def`, one of:

    {"kind": "gpt", "n_layer", "d_model", "vocab", "n_ctx", ...}           GPT-2 style decoder
    {"kind": "bert", "n_layer", "d_model", "vocab", ...}                   BERT with its MLM/NSP heads
    {"kind": "vit", "n_layer", "d_model", "image", "patch", "classes"}     ViT with a class token
    {"kind": "transformer_xl", "n_layer", "d_model", "n_head", "d_head", "d_inner", "n_token",
     "cutoffs", "div_val", "tie_projs"}                                    kimiyoung/NVIDIA Transformer-XL
    {"kind": "layers", "layers": [{"name", "params"}, ...]}                 a layer list, forward order
    {"kind": "params", "params": N, "tensors": T}                          a count only: T equal tensors

`d_inner` defaults to 4 x d_model, `n_head` to d_model / 64. Every layer of a transformer holds
its attention (q, k, v, out: 4 d^2 with biases), its feed-forward (2 d d_inner with biases) and two
layer norms; Transformer-XL's attention has no biases and adds its relative-position projection
(d x n_head d_head) and the adaptive embedding's clusters (d_embed / div_val^i wide, each with its
projection to d_model), the softmax tied to them. Why tensors and not only a count: how much
backward hides depends on when each gradient is ready (the embedding, tied to the output, last).

FLOPs a token: a tensor's matmul FLOPs are proportional to its parameters (biases, norms and
embedding look-ups cost nothing comparable), plus attention's scores and weighted sum,
4 x seq x n_head x d_head a layer when `seq_len` is given; backward runs the layers in reverse,
so the share done when a layer's gradients are ready is the FLOPs of the layers after it.
"""
from __future__ import annotations

from fleetbench import cmdline

KINDS = ("gpt", "bert", "vit", "transformer_xl", "layers", "params")


class ModelDefError(cmdline.UserError):
    """A model definition that cannot be read; one line naming the key."""


def _int(defn: dict, key: str, where: str, default: int | None = None) -> int:
    value = defn.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ModelDefError(f"{where}: model_def.{key} must be an integer >= 1 (got {value!r})")
    return value


def _block(d: int, inner: int, attn: int, bias: bool, rel: bool = False) -> list[tuple[str, int, int]]:
    """One transformer layer's tensors, forward order: (name, params, matmul params)."""
    b = 1 if bias else 0
    out = [("attn.qkv", 3 * d * attn + 3 * attn * b, 3 * d * attn)]
    if rel:
        out.append(("attn.r_net", d * attn, d * attn))
    out += [("attn.out", attn * d + d * b, attn * d), ("ln1", 2 * d, 0),
            ("ff.in", d * inner + inner, d * inner), ("ff.out", inner * d + d, inner * d), ("ln2", 2 * d, 0)]
    return out


def _layers(defn: dict, where: str, rel: bool = False, bias: bool = True) -> list[tuple[str, int, int, int]]:
    """The stack of layers: (name, params, matmul params, layer index) in forward order."""
    n, d = _int(defn, "n_layer", where), _int(defn, "d_model", where)
    heads = _int(defn, "n_head", where, max(1, d // 64))
    attn = heads * _int(defn, "d_head", where, d // heads)
    inner = _int(defn, "d_inner", where, 4 * d)
    return [(f"layer{i}.{name}", p, m, i) for i in range(n) for name, p, m in _block(d, inner, attn, bias, rel)]


def _attention_flops(defn: dict, where: str) -> int:
    """Attention's own FLOPs a token and layer, in matmul-parameter units (0 without seq_len)."""
    if not defn.get("seq_len"):
        return 0
    d = _int(defn, "d_model", where)
    heads = _int(defn, "n_head", where, max(1, d // 64))
    return 2 * _int(defn, "seq_len", where) * heads * _int(defn, "d_head", where, d // heads)


def _gpt(defn: dict, where: str) -> tuple[list, list, list]:
    d, vocab = _int(defn, "d_model", where), _int(defn, "vocab", where)
    first = [("wte", vocab * d, 0), ("wpe", _int(defn, "n_ctx", where, 1024) * d, 0)]
    last = [("ln_f", 2 * d, 0)]
    return first, last, [("lm_head(tied)", 0, vocab * d)]


def _bert(defn: dict, where: str) -> tuple[list, list, list]:
    d, vocab = _int(defn, "d_model", where), _int(defn, "vocab", where)
    first = [("word_emb", vocab * d, 0), ("pos_emb", _int(defn, "max_positions", where, 512) * d, 0),
             ("type_emb", _int(defn, "type_vocab", where, 2) * d, 0), ("emb_ln", 2 * d, 0)]
    last = [("pooler", d * d + d, d * d), ("nsp", 2 * d + 2, 0), ("mlm.transform", d * d + d, d * d),
            ("mlm.ln", 2 * d, 0), ("mlm.bias", vocab, 0)]
    return first, last, [("mlm.decoder(tied)", 0, vocab * d)]


def _vit(defn: dict, where: str) -> tuple[list, list, list]:
    d, patch = _int(defn, "d_model", where), _int(defn, "patch", where, 16)
    patches = (_int(defn, "image", where, 224) // patch) ** 2
    conv = _int(defn, "channels", where, 3) * patch * patch * d
    first = [("patch_embed", conv + d, conv), ("cls_token", d, 0), ("pos_embed", (patches + 1) * d, 0)]
    classes = _int(defn, "classes", where, 1000)
    return first, [("ln_f", 2 * d, 0), ("head", d * classes + classes, d * classes)], []


def _txl(defn: dict, where: str) -> tuple[list, list, list]:
    d, tokens = _int(defn, "d_model", where), _int(defn, "n_token", where)
    d_embed, div = _int(defn, "d_embed", where, d), _int(defn, "div_val", where, 1)
    edges = [0] + list(defn.get("cutoffs") or []) + [tokens]
    ties = list(defn.get("tie_projs") or [False] * (len(edges) - 1))
    first, heads = [], []
    for i in range(len(edges) - 1):
        width = d_embed // (div ** i) if div > 1 else d_embed
        first.append((f"emb{i}", (edges[i + 1] - edges[i]) * width, 0))
        if div > 1 or width != d:
            first.append((f"emb_proj{i}", d * width, 0))
            if i < len(ties) and not ties[i]:
                heads.append((f"out_proj{i}", d * width, d * width if i == 0 else 0))
    clusters = len(edges) - 2
    heads += [("out_bias", tokens, 0), ("cluster", clusters * d_embed + clusters, 0)]
    n_head = _int(defn, "n_head", where, max(1, d // 64))
    first.append(("r_bias", 2 * n_head * _int(defn, "d_head", where, d // n_head), 0))
    # the softmax's head cluster (most tokens) is the one matmul tied to the first embedding
    return first, heads, [("softmax(tied)", 0, (edges[1] + clusters) * d_embed)]


STACKS = {"gpt": _gpt, "bert": _bert, "vit": _vit, "transformer_xl": _txl}


def _forward(defn: dict, where: str) -> list[tuple[str, int, float]]:
    """(name, params, FLOPs a token in matmul-parameter units) of every tensor, forward order; a
    tied output's FLOPs ride on the last tensor (its parameters are the embedding's)."""
    kind = defn.get("kind")
    if kind == "layers":
        rows = defn.get("layers") or []
        if not rows or not all(isinstance(r, dict) and _int(r, "params", where) for r in rows):
            raise ModelDefError(f"{where}: model_def.layers must be a list of {{name, params}} (forward order)")
        return [(str(r.get("name", i)), r["params"], float(r.get("flops", r["params"]))) for i, r in enumerate(rows)]
    if kind == "params":
        count, parts = _int(defn, "params", where), _int(defn, "tensors", where, 100)
        return [(f"part{i}", count // parts + (i < count % parts), 1.0) for i in range(parts)]
    if kind not in STACKS:
        raise ModelDefError(f"{where}: model_def.kind {kind!r}: expected one of {', '.join(KINDS)}")
    first, last, tied = STACKS[kind](defn, where)
    stack = _layers(defn, where, rel=kind == "transformer_xl", bias=kind != "transformer_xl")
    attention = _attention_flops(defn, where)
    rows = [(n, p, float(m)) for n, p, m in first]
    for name, params, matmul, _ in stack:
        rows.append((name, params, float(matmul + (attention if name.endswith("attn.qkv") else 0))))
    rows += [(n, p, float(m)) for n, p, m in last]
    if tied:
        name, params, flops = rows[-1]
        rows[-1] = (name, params, flops + sum(m for _, _, m in tied))
    return rows


def gradients(defn: dict, where: str) -> tuple[list[float], list[float]]:
    """(float32 bytes of each tensor, share of backward done when it is ready), in ready order:
    backward runs the forward rows in reverse; a first-layer embedding tied to the output is
    ready only at the very end, where it is in any case."""
    if not isinstance(defn, dict):
        raise ModelDefError(f"{where}: config.model_def must be a mapping with a kind ({', '.join(KINDS)})")
    rows = _forward(defn, where)
    total = sum(f for _, _, f in rows) or 1.0
    sizes, ready, done = [], [], 0.0
    for _, params, flops in reversed(rows):
        done += flops
        if params:
            sizes.append(4.0 * params)
            ready.append(min(1.0, done / total))
    return sizes, ready


def parameters(defn: dict, where: str = "model_def") -> int:
    """Trainable parameters of the definition."""
    return sum(p for _, p, _ in _forward(defn, where))


def read_table(path: str) -> dict:
    """`--model-def FILE`: model name -> definition, YAML or JSON, every one checked (ValueError,
    one line naming the flag, the file and the model)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            table = yaml.safe_load(handle.read())
    except yaml.YAMLError as err:
        raise ValueError(f"--model-def {path}: not YAML or JSON ({str(err).splitlines()[0]}); expected a "
                         "mapping of model name to definition") from None
    if not isinstance(table, dict) or not table:
        raise ValueError(f"--model-def {path}: expected a mapping of model name to definition")
    for name, defn in table.items():
        try:
            gradients(defn, f"--model-def {path} [{name}]")
        except ModelDefError as err:
            raise ValueError(str(err)) from None
    return {str(k): v for k, v in table.items()}


def apply(records: list[dict], table: dict) -> list[dict]:
    """Records whose config.model (else benchmark) a definition names, given it; a record's own
    definition or gradient bytes win."""
    out = []
    for record in records:
        config = record.get("config") or {}
        name = str(config.get("model") or record.get("benchmark"))
        if name in table and not config.get("model_def") and not (record.get("metrics") or {}).get("grad_bytes"):
            record = dict(record, config=dict(config, model=name, model_def=table[name]))
        out.append(record)
    return out
