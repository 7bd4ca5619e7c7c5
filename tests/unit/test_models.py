"""The BERT and Transformer data readers: they accept what the generators write and reject
malformed input with one line that names the file. (Each model's 2-rank run under the real
launcher, reading such a file or directory, is in tests/job/test_registered.py.)
"""
import numpy as np
import pytest

from datasets import bert, wmt16

BERT_TINY = dict(vocab_size=2048, seq_len=32, max_predictions=5)  # bert_large.yaml's tiny preset


# ---------------------------------------------------------------- readers reject malformed input
def one_line_naming(err, path):
    text = str(err.value)
    assert "\n" not in text and str(path) in text
    return text


@pytest.fixture
def bert_arrays():
    return bert.generate(8, 32, 2048, 5, seed=1)


@pytest.mark.parametrize("damage, expected", [
    (lambda a: a.update(input_ids=a["input_ids"][:, :16]), "input_ids has shape (8, 16), expected (8, 32)"),
    (lambda a: a["input_ids"].__setitem__((3, 4), 2048), "input_ids holds 2048"),
    (lambda a: a["masked_labels"].__setitem__((0, 0), 99999), "masked_labels holds 99999"),
    (lambda a: a["masked_positions"].__setitem__((0, 0), 32), "masked_positions holds 32"),
    (lambda a: a["segment_ids"].__setitem__((0, 0), 2), "segment_ids holds 2"),
    (lambda a: a.pop("next_sentence_labels"), "missing array(s) next_sentence_labels"),
    (lambda a: a.update(masked_weights=np.zeros_like(a["masked_weights"])), "has no masked prediction"),
    (lambda a: a.update(input_ids=a["input_ids"].astype("float32")), "expected integers"),
])
def test_bert_reader_rejects_malformed_files(tmp_path, bert_arrays, damage, expected):
    damage(bert_arrays)
    path = bert.write(tmp_path / "bad.npz", bert_arrays)
    with pytest.raises(bert.DataError) as err:
        bert.load(str(path), **BERT_TINY)
    assert expected in one_line_naming(err, path)


def test_bert_reader_rejects_empty_and_foreign_files(tmp_path):
    empty, text = tmp_path / "empty.npz", tmp_path / "text.npz"
    empty.write_bytes(b"")
    text.write_text("not numpy\n")
    for path, expected in ((empty, "empty file"), (text, "not a numpy .npz archive"),
                           (tmp_path / "missing.npz", "no such file")):
        with pytest.raises(bert.DataError) as err:
            bert.load(str(path), **BERT_TINY)
        assert expected in one_line_naming(err, path)
    shardless = tmp_path / "shards"
    shardless.mkdir()
    with pytest.raises(bert.DataError) as err:
        bert.load(str(shardless), **BERT_TINY)
    assert "no .npz files" in one_line_naming(err, shardless)


def test_bert_reader_reads_a_directory_of_shards(tmp_path, bert_arrays):
    for i in range(2):
        bert.write(tmp_path / f"part-{i}.npz", bert.generate(8, 32, 2048, 5, seed=i))
    assert len(bert.load(str(tmp_path), **BERT_TINY)["input_ids"]) == 16


def test_bert_ranks_split_each_global_batch(bert_arrays):
    bert_arrays.pop("vocab_size")
    whole = list(bert.Batches(bert_arrays, 4, 0, 1, seed=3))
    halves = [list(bert.Batches(bert_arrays, 2, r, 2, seed=3)) for r in (0, 1)]
    for i, batch in enumerate(whole):
        joined = np.concatenate([halves[0][i]["input_ids"], halves[1][i]["input_ids"]])
        np.testing.assert_array_equal(joined, batch["input_ids"])


@pytest.fixture
def wmt_dir(tmp_path):
    return wmt16.write(tmp_path / "wmt", wmt16.generate(40, 50, 12, seed=2), 50)


def replace_line(path, number, text):
    lines = path.read_text().splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("damage, file, expected", [
    (lambda d: replace_line(d / "train.src", 3, "5 7 50"), "train.src:3", "token id 50 outside the vocab"),
    (lambda d: replace_line(d / "train.tgt", 2, "5 x 7"), "train.tgt:2", "not a line of integer token ids"),
    (lambda d: replace_line(d / "train.tgt", 4, ""), "train.tgt:4", "empty sentence"),
    (lambda d: (d / "train.src").write_text(""), "train.src", "empty file"),
    (lambda d: (d / "vocab.txt").write_text(""), "vocab.txt", "empty file"),
    (lambda d: (d / "vocab.txt").write_text("a\nb\nc\nd\n"), "vocab.txt", "first four tokens must be"),
    (lambda d: (d / "train.tgt").write_text((d / "train.tgt").read_text() + "5 6\n"), "train.tgt",
     "41 lines but train.src has 40"),
    (lambda d: (d / "train.src").unlink(), "train.src", "no such file"),
])
def test_wmt16_reader_rejects_malformed_files(wmt_dir, damage, file, expected):
    damage(wmt_dir)
    with pytest.raises(wmt16.DataError) as err:
        wmt16.load(str(wmt_dir), 12)
    assert expected in one_line_naming(err, wmt_dir / file)


def test_wmt16_token_budget_batches(wmt_dir):
    vocab, pairs, skipped = wmt16.load(str(wmt_dir), 8)
    longer = sum(max(len(s), len(t)) > 8 for s, t in wmt16.generate(40, 50, 12, seed=2))
    assert vocab == 50 and skipped == longer > 0
    ranks = [list(wmt16.Batches(pairs, 40, r, 2, seed=0)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) > 0  # equal counts per rank
    for batch in ranks[0] + ranks[1]:
        assert batch["src"].size <= 40 and batch["tgt_out"].size <= 40  # padded size within the budget
        assert (batch["tgt_in"][:, 0] == wmt16.BOS).all()
        np.testing.assert_array_equal(batch["tgt_in"] != wmt16.PAD, batch["tgt_out"] != wmt16.PAD)
        shifted = batch["tgt_in"][:, 1:] != wmt16.PAD  # decoder input is the labels shifted right
        np.testing.assert_array_equal(batch["tgt_in"][:, 1:][shifted], batch["tgt_out"][:, :-1][shifted])
