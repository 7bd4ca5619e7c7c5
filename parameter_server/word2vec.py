"""Skip-gram Word2Vec with negative sampling through Fleet's parameter server (FleetX's PS
Word2Vec benchmark on the 1-Billion-word corpus).

    fleetbench data gen word2vec --out data/w2v --text 1b-words/training-monolingual/* --files 32
    fleetrun --server_num 2 --trainer_num 2 parameter_server/word2vec.py --set data.path=data/w2v
    fleetrun --server_num 1 --trainer_num 1 parameter_server/word2vec.py --preset tiny

Three sparse tables on the servers (input vectors, output vectors, output biases); pairs,
negatives (unigram^0.75) and sub-sampling come from the data pipe. Figures: words/s and loss, and
3CosAdd analogy accuracy when `--set analogy_path=questions-words.txt` is given.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses
from typing import Optional

from datasets import word2vec
from fleetbench.measure import config
from fleetbench.train import ps


@dataclasses.dataclass
class Word2VecConfig(ps.PSConfig):
    # FleetX/PaddleRec word2vec: 300-wide vectors, window 5, 5 negatives, sub-sampling 1e-3,
    # min_count 5, SGD at 1.0 on the batch-mean loss, batch 100
    embedding_dim: int = 300
    window: int = 5
    neg: int = 5
    sample: float = 0.001
    min_count: int = 5
    batch_size: int = 100
    lr: float = 1.0
    warmup_steps: int = 20
    log_every: int = 500
    synthetic_sentences: int = 200000  # used when data.path is unset
    synthetic_vocabulary: int = 50000
    synthetic_files: int = 32
    analogy_path: Optional[str] = None  # questions-words.txt-style file: adds 3CosAdd analogy accuracy
    analogy_vocabulary: int = 30000  # answers among the most frequent words only (word2vec.c's default)

    def validate(self) -> None:
        super().validate()
        if self.data.path is not None:  # a missing or malformed dictionary fails here, before launch
            word2vec.id_files(self.data.path)
            word2vec.read_counts(word2vec.Path(self.data.path) / "dict.txt")
        if self.analogy_vocabulary < 4:
            raise config.ConfigError(f"config key 'analogy_vocabulary' must be >= 4 (got {self.analogy_vocabulary!r})")
        if self.analogy_path is not None:  # format errors now, before anything is launched
            try:
                word2vec.read_analogies(self.analogy_path)
            except (ValueError, OSError) as err:
                raise config.ConfigError(f"config key 'analogy_path': {err}") from None


def build(cfg: Word2VecConfig) -> ps.Workload:
    import paddle
    import paddle.nn.functional as F
    vocabulary = len(word2vec.read_counts(dictionary(cfg)))
    center, context = (paddle.static.data(n, [-1, 1], "int64") for n in word2vec.SLOTS[:2])
    negatives = paddle.static.data("negatives", [-1, cfg.neg], "int64")
    words = paddle.static.data("words", [-1, 1], "int64")
    dim = cfg.embedding_dim

    def lookup(ids, name, width, init):
        table = paddle.ParamAttr(name=name, initializer=init)
        out = paddle.static.nn.embedding(paddle.reshape(ids, [-1, 1]), [vocabulary, width], is_sparse=True,
                                          param_attr=table)
        return paddle.reshape(out, [-1, width])

    zero = paddle.nn.initializer.Constant(0.0)
    vec = lookup(center, "emb", dim, paddle.nn.initializer.Uniform(-0.5 / dim, 0.5 / dim))
    true_logit = (paddle.sum(vec * lookup(context, "emb_w", dim, zero), axis=1, keepdim=True)
                  + lookup(context, "emb_b", 1, zero))
    neg_w = paddle.reshape(lookup(negatives, "emb_w", dim, zero), [-1, cfg.neg, dim])
    neg_logit = (paddle.squeeze(paddle.matmul(paddle.unsqueeze(vec, 1), neg_w, transpose_y=True), 1)
                 + paddle.reshape(lookup(negatives, "emb_b", 1, zero), [-1, cfg.neg]))
    loss = paddle.mean(
        F.binary_cross_entropy_with_logits(true_logit, paddle.ones_like(true_logit), reduction="none")
        + paddle.sum(F.binary_cross_entropy_with_logits(neg_logit, paddle.zeros_like(neg_logit),
                                                        reduction="none"), axis=1, keepdim=True))
    command = ps.pipe_command("datasets.word2vec", "pipe", "--dict", dictionary(cfg), "--window", cfg.window,
                              "--neg", cfg.neg, "--sample", cfg.sample, "--seed", cfg.seed)
    return ps.Workload(inputs=[center, context, negatives, words], loss=loss, units_var=words,
                       optimizer=paddle.optimizer.SGD(cfg.lr), pipe_command=command,
                       after_training=(lambda: analogy_metrics(cfg)) if cfg.analogy_path else None)


def analogy_metrics(cfg: Word2VecConfig) -> dict:
    """Worker 0, after training: 3CosAdd accuracy of the servers' input vectors ("emb") over the
    `analogy_vocabulary` most frequent words; questions using any other word are skipped."""
    tokens = word2vec.read_tokens(dictionary(cfg))[:cfg.analogy_vocabulary]  # ids are frequency ranks
    questions, skipped = word2vec.analogy_ids(word2vec.read_analogies(cfg.analogy_path), tokens)
    accuracy = word2vec.analogy_accuracy(ps.sparse_table_rows("emb")[:len(tokens)], questions)
    return {"analogy_accuracy": None if len(questions) == 0 else accuracy,
            "analogy_questions": len(questions), "analogy_skipped": skipped}


def data_dir(cfg: Word2VecConfig):
    if cfg.data.path:
        return cfg.data.path
    params = {"sentences": cfg.synthetic_sentences, "vocabulary": cfg.synthetic_vocabulary,
              "files": cfg.synthetic_files, "min_count": cfg.min_count, "seed": cfg.seed}
    return ps.synthetic_dir("word2vec", params, lambda out: word2vec.generate(out, **params))


def dictionary(cfg: Word2VecConfig) -> str:
    return str(word2vec.Path(data_dir(cfg)) / "dict.txt")


def first_error(paths):
    return word2vec.first_error(paths, len(word2vec.read_counts(word2vec.Path(paths[0]).parents[1] / "dict.txt")))


if __name__ == "__main__":
    ps.main(__file__, Word2VecConfig, build, lambda cfg: word2vec.id_files(data_dir(cfg)), first_error)
