"""VGG16, BERT and Transformer scripts under the real launcher, and their data readers.

Each script runs 2 gloo processes on its tiny preset and must append exactly one correct record;
the readers must accept what the generators write and reject malformed input with one line that
names the file.
"""
import math

import numpy as np
import pytest
import util

from datasets import bert, wmt16

BERT_TINY = dict(vocab_size=2048, seq_len=32, max_predictions=5)  # bert_large.yaml's tiny preset


def run_two_ranks(tmp_path, script, *sets):
    results = tmp_path / "runs.jsonl"
    args = ["--nproc_per_node", 2, f"collective/{script}.py", "--preset", "tiny", "--results", results]
    for item in sets:
        args += ["--set", item]
    done = util.fleetrun(tmp_path / "log", *args, timeout=240)
    worker0 = (tmp_path / "log/workerlog.0").read_text(errors="replace")
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:] + worker0[-3000:]
    records = util.records(results)
    assert len(records) == 1  # rank 0 only
    ranks = util.rank_summaries(tmp_path / "log")
    assert sorted(ranks) == [0, 1]
    return records[0], ranks


def check_record(record, ranks, benchmark, unit):
    m = record["metrics"]
    assert record["benchmark"] == benchmark and record["preset"] == "tiny" and record["error"] is None
    assert record["world_size"] == 2 and record["mode"] == "collective" and record["method"] == "mgwfbp"
    cfg = record["config"]
    assert m["unit"] == unit and m["measured_steps"] == cfg["steps"] - cfg["warmup_steps"]
    # global work over the slowest rank's time, from the ranks' own log lines
    assert m["elapsed_s"] == pytest.approx(max(r[1] for r in ranks.values()), rel=1e-5)
    assert m["throughput"] == pytest.approx(sum(r[3] for r in ranks.values()) / m["elapsed_s"], rel=1e-6)
    assert m["samples_per_s"] == pytest.approx(sum(r[2] for r in ranks.values()) / m["elapsed_s"], rel=1e-6)
    assert math.isfinite(m["loss_first"]) and m["loss_last"] < m["loss_first"]  # it learns


@pytest.mark.job
def test_bert_large_from_a_data_file(tmp_path):
    data = tmp_path / "bert.npz"
    assert bert.cli([str(data), "--examples", "64", "--seq-len", "32", "--vocab-size", "2048",
                     "--max-predictions", "5"]) == 0
    record, ranks = run_two_ranks(tmp_path, "bert_large", f"data.path={data}")
    check_record(record, ranks, "bert_large", "tokens/s")
    arrays = bert.load(str(data), **BERT_TINY)
    tokens_per_example = (arrays["input_ids"] != bert.PAD).sum(axis=1)
    ratio = record["metrics"]["throughput"] / record["metrics"]["samples_per_s"]  # tokens per example
    assert tokens_per_example.min() <= ratio <= 32 and ratio > 0.8 * 32  # mostly full-length examples


@pytest.mark.job
def test_transformer_from_a_data_directory(tmp_path):
    data = tmp_path / "wmt16"
    assert wmt16.cli([str(data), "--pairs", "512", "--vocab-size", "1000", "--max-len", "16"]) == 0
    record, ranks = run_two_ranks(tmp_path, "transformer", f"data.path={data}")
    check_record(record, ranks, "transformer", "tokens/s")
    ratio = record["metrics"]["throughput"] / record["metrics"]["samples_per_s"]  # target tokens per pair
    assert 2 <= ratio <= 17
    assert record["config"]["vocab_size"] == 1000  # taken from vocab.txt


@pytest.mark.job
def test_vgg16_synthetic(tmp_path):
    record, ranks = run_two_ranks(tmp_path, "vgg16")
    check_record(record, ranks, "vgg16", "images/s")
    assert record["metrics"]["throughput"] == pytest.approx(record["metrics"]["samples_per_s"])


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


@pytest.mark.job
def test_a_bad_data_path_is_one_line_before_training(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"")
    done = util.run_script("collective/bert_large.py", "--preset", "tiny", "--set", f"data.path={bad}",
                           "--check")
    errors = [line for line in done.stderr.splitlines() if line.startswith("bert_large: error:")]
    assert done.returncode == 2 and len(errors) == 1  # (paddle's own import warnings may precede it)
    assert str(bad) in errors[0] and "empty file" in errors[0]
    assert done.stdout == ""  # no config printed: it stopped at the data
