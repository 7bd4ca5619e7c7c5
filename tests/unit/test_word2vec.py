"""Word2Vec data: preprocessing (tokenise, count, dictionary with min_count, id files), the Zipfian
synthetic corpus, sub-sampling, negative sampling, pair windows and the pipe."""
import io
import json
from collections import Counter

import numpy as np

from datasets import cli as data_cli
from datasets import word2vec


def test_preprocess_dictionary_and_ids(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("The cat sat on the mat .\nthe dog sat\nrare words here\n\nThe the cat\n")
    summary = word2vec.preprocess([text], tmp_path / "out", min_count=2, files=2)
    dictionary = (tmp_path / "out" / "dict.txt").read_text().splitlines()
    # lower-cased, counted, >= min_count, most frequent first, ties alphabetical
    assert dictionary == ["the 5", "cat 2", "sat 2"]
    assert summary == {"vocabulary": 3, "sentences": 3, "words": 9}
    ids = [p.read_text().splitlines() for p in word2vec.id_files(tmp_path / "out")]
    # "rare words here" keeps no word and "the dog sat" keeps two; lines dealt round-robin
    assert ids == [["0 1 2 0", "0 0 1"], ["0 2"]]


def test_synthetic_corpus_is_zipfian_and_deterministic(tmp_path):
    word2vec.synthetic_corpus(tmp_path / "a.txt", sentences=3000, vocabulary=1000, seed=1)
    word2vec.synthetic_corpus(tmp_path / "b.txt", sentences=3000, vocabulary=1000, seed=1)
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    counts = Counter((tmp_path / "a.txt").read_text().split())
    ranked = [c for _, c in counts.most_common()]
    # log-count falls with log-rank (Zipf): slope clearly negative over the head
    slope = np.polyfit(np.log(np.arange(1, 51)), np.log(ranked[:50]), 1)[0]
    assert slope < -0.5
    assert ranked[0] > 20 * ranked[len(ranked) // 2]


def test_gen_cli_writes_dictionary_and_ids(tmp_path, capsys):
    assert data_cli.cli(["gen", "word2vec", "--out", str(tmp_path / "w"), "--sentences", "200", "--vocabulary",
                         "300", "--files", "3", "--min-count", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert len(word2vec.id_files(tmp_path / "w")) == 3
    assert summary["vocabulary"] == len(word2vec.read_counts(tmp_path / "w" / "dict.txt"))
    assert "word2vec" in data_cli.generators()


def test_subsampling_matches_word2vec_c():
    counts = [1000000, 10000, 100, 1]
    keep = word2vec.keep_probabilities(counts, 1e-3)
    total = sum(counts)
    f0 = counts[0] / total
    assert abs(keep[0] - (np.sqrt(f0 / 1e-3) + 1) * 1e-3 / f0) < 1e-12
    assert keep[0] < 0.1 and keep[-1] == 1.0  # frequent words dropped often, rare ones kept
    assert word2vec.keep_probabilities(counts, 0) == [1.0] * 4


def test_negatives_follow_unigram_to_the_075():
    counts = [8000, 1000, 100, 10]
    maker = word2vec.PairMaker(counts, window=5, neg=5, sample=0, seed=3)
    draws = Counter(maker.negatives(20000).ravel().tolist())
    expected = np.array(counts, float) ** 0.75
    expected /= expected.sum()
    observed = np.array([draws[i] for i in range(4)], float) / 100000
    assert np.allclose(observed, expected, atol=0.01)


def test_pairs_stay_inside_the_window():
    maker = word2vec.PairMaker([10] * 50, window=2, neg=3, sample=0, seed=0)
    sentence = list(range(20))
    centres, contexts, negatives = maker.pairs(sentence)
    assert len(centres) and all(1 <= abs(c - x) <= 2 for c, x in zip(centres, contexts))
    assert negatives.shape == (len(centres), 3)
    assert set(centres.tolist()) == set(sentence)  # no sub-sampling: every word is a centre
    # every word has at least its nearest neighbours as contexts, at most 2 on each side
    per_centre = Counter(centres.tolist())
    assert all(1 <= n <= 4 for n in per_centre.values())
    frequent = word2vec.PairMaker([10**6] + [1] * 49, window=2, neg=3, sample=1e-3, seed=0)
    kept = frequent.pairs([0] * 1000)[0]
    assert len(kept) < 2 * 4 * 100  # the very frequent word is mostly sub-sampled away


def test_pipe_counts_words_on_the_pairs_and_skips_invalid_lines(tmp_path):
    counts = [50, 40, 30, 20, 10]
    lines = b"0 1 2 3 4\n0 1\n0 9\nnot ids\n3 3 2\n"
    out = io.StringIO()
    stats = word2vec.pipe(io.BytesIO(lines), out, counts, window=5, neg=2, sample=0, seed=1,
                          stats_path=str(tmp_path / "s.jsonl"))
    assert stats["valid"] == 3 and stats["invalid"] == 2 and stats["words"] == 10
    rows = [list(map(int, l.split())) for l in out.getvalue().splitlines()]
    assert len(rows) == stats["pairs"]
    # slots: 1 centre | 1 context | 2 negatives | 1 words
    assert all(r[0] == 1 and r[2] == 1 and r[4] == 2 and r[7] == 1 for r in rows)
    assert sum(r[8] for r in rows) + stats["words_unsent"] == stats["words"]


def test_first_error_names_file_and_line(tmp_path):
    path = tmp_path / "part-00000"
    path.write_text("0 1 2\n1 7\n")
    assert word2vec.first_error([path], 5) == f"{path}:2: id >= dictionary size 5"


def test_pairs_never_cross_sentences_and_words_are_all_counted():
    maker = word2vec.PairMaker([10] * 100, window=5, neg=2, sample=0, seed=4)
    sentences = [list(range(0, 8)), [50], list(range(20, 30)), [60, 61]]
    sid, centres, contexts, _ = maker.block_pairs(sentences)
    for s, c, x in zip(sid, centres, contexts):
        assert c in sentences[s] and x in sentences[s]
    assert list(sid) == sorted(sid) and 1 not in set(sid.tolist())  # a one-word sentence has no pair
    text, left = maker.lines(sentences, carry=7)
    words = [int(line.split()[-1]) for line in text.splitlines()]
    assert sum(words) + left == 7 + sum(map(len, sentences))


def test_analogy_3cosadd_on_hand_made_vectors(tmp_path):
    # man, king, woman, queen, prince: king - man + woman points exactly at queen; prince is the
    # nearest word to king itself, and a, b, c must be excluded from the answers
    tokens = ["man", "king", "woman", "queen", "prince", "apple"]
    vectors = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 1, 1, 0], [1, 1.1, 0, 0.1], [0, 0, 0, 1]],
                       float)
    path = tmp_path / "questions-words.txt"
    path.write_text(": royalty\nMan King Woman Queen\n\nman king woman prince\n"
                    ": other\nking man queen woman\nman king woman duchess\n")
    questions = word2vec.read_analogies(path)
    assert questions[0] == ("man", "king", "woman", "queen") and len(questions) == 4
    ids, skipped = word2vec.analogy_ids(questions, tokens)
    assert skipped == 1 and ids.tolist() == [[0, 1, 2, 3], [0, 1, 2, 4], [1, 0, 3, 2]]
    # q1 right (queen), q2 wrong (answer is queen, not prince), q3 right: queen - king + man = woman
    assert word2vec.analogy_accuracy(vectors, ids) == 2 / 3
    assert word2vec.analogy_accuracy(vectors, ids, chunk=1) == 2 / 3  # chunking changes nothing
    # the answer is never one of a, b, c, even when it is the closest (here b - a + c is b)
    same = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]])
    assert word2vec.analogy_accuracy(same, np.array([[0, 1, 2, 3]])) == 1.0
    assert np.isnan(word2vec.analogy_accuracy(vectors, np.zeros((0, 4), int)))


def test_analogy_file_errors_name_the_line(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text(": s\na b c d\na b c\n")
    try:
        word2vec.read_analogies(path)
    except ValueError as err:
        assert str(err).startswith(f"{path}:3: expected an analogy `a b c d`")
    else:
        raise AssertionError("a 3-word line was accepted")


def test_synthetic_analogies_use_the_dictionary(tmp_path):
    assert data_cli.cli(["gen", "word2vec", "--out", str(tmp_path / "w"), "--sentences", "200", "--vocabulary",
                         "300", "--files", "2", "--min-count", "2", "--analogies", "200"]) == 0
    tokens = word2vec.read_tokens(tmp_path / "w" / "dict.txt")
    questions = word2vec.read_analogies(tmp_path / "w" / "analogies.txt")
    ids, skipped = word2vec.analogy_ids(questions, tokens)
    assert len(questions) == 200 and 5 <= skipped <= 40 and len(ids) + skipped == 200
    assert all(len(set(q)) == 4 for q in ids.tolist())


def test_a_bad_dictionary_is_refused_by_check_in_one_line(tmp_path):
    """#16.3: found before launch (`fleetbench launch` runs --check first), not stored as a failed run."""
    import subprocess

    from util import PYTHON, REPO, env
    word2vec.generate(tmp_path / "w", sentences=50, vocabulary=100, files=1, min_count=1, seed=1)
    dictionary = tmp_path / "w" / "dict.txt"
    cases = {"the 5\nof x\n": f"{dictionary}:2: expected `token count`, got 'of x'",
             "": f"{dictionary}: empty dictionary", None: "expected a preprocessed directory with dict.txt"}
    for text, message in cases.items():
        dictionary.unlink(missing_ok=True)
        if text is not None:
            dictionary.write_text(text)
        done = subprocess.run([PYTHON, str(REPO / "parameter_server/word2vec.py"), "--preset", "tiny", "--check",
                               "--set", f"data.path={tmp_path / 'w'}"], env=env(), capture_output=True, text=True,
                              timeout=60)
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        assert done.returncode == 2 and len(errors) == 1 and message in errors[0], done.stderr
        assert "Traceback" not in done.stderr
