"""datasets/text.py: byte tokens of a text, the learnable synthetic stream, each data-parallel rank's
own windows, and token files the model cannot read refused in one line naming them."""
import numpy as np
import pytest

from datasets import text


def test_the_default_corpus_is_pythons_docs_as_bytes(tmp_path):
    out = tmp_path / "docs.npy"
    assert text.cli(["--out", str(out)]) == 0
    ids = np.load(out)
    assert ids.dtype == np.uint8 and ids.size > 100_000
    assert bytes(ids[:2000]).decode("utf-8", "replace") in text.corpus_text()


def test_a_given_text_file_round_trips(tmp_path):
    source = tmp_path / "t.txt"
    source.write_text("héllo wörld\n" * 50, encoding="utf-8")
    assert text.cli(["--out", str(tmp_path / "t.npy"), "--text", str(source)]) == 0
    assert bytes(text.load(str(tmp_path / "t.npy"), 256, 8)).decode() == source.read_text()


@pytest.mark.parametrize("vocab,seed", [(16, 1), (256, 2021), (1000, 7)])
def test_synthetic_walks_follow_one_chain_with_two_successors(vocab, seed):
    a, b = text.synthetic(64, 33, vocab, seed, rank=0), text.synthetic(64, 33, vocab, seed, rank=1)
    successors = {}
    for w in np.concatenate([a, b]):
        for x, y in zip(w[:-1], w[1:]):
            successors.setdefault(int(x), set()).add(int(y))
    assert max(len(s) for s in successors.values()) <= 2
    assert not np.array_equal(a, b) and np.array_equal(a, text.synthetic(64, 33, vocab, seed, rank=0))


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_take_disjoint_windows(world):
    ids = np.arange(1000)
    parts = [text.windows(ids, 9, r, world) for r in range(world)]
    starts = sorted(int(w[0]) for p in parts for w in p)
    assert starts == list(range(0, 1000 - 9, 10)) and all(p.shape[1] == 10 for p in parts)


@pytest.mark.parametrize("array,words", [(np.zeros((2, 50), np.int64), "1-D array"),
                                         (np.full(100, 300), "outside the model's vocabulary"),
                                         (np.zeros(10, np.int64), "fewer than two sequences"),
                                         (np.zeros(100, np.float32), "integer token ids")])
def test_a_file_the_model_cannot_read_is_one_line(tmp_path, array, words):
    path = tmp_path / "bad.npy"
    np.save(path, array)
    with pytest.raises(text.DataError, match=words) as err:
        text.load(str(path), 256, 32)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
