"""Reader throughput vs training consumption for the parameter-server benchmarks.

    python bench/reader_throughput.py                      # ctr and word2vec, tiny and full
    python bench/reader_throughput.py --benchmarks ctr --presets tiny --json

Reader: the script's own pipe_command (the data generator Fleet's dataset runs per file) on the
preset's files, timed wall-clock, in lines/s read and examples/s written (examples = Criteo
lines, or Word2Vec pairs), one process at a time (one dataset thread): `steady` is one process
over all files (the sustained rate), `per_file` one process per file as Fleet runs it (each file
pays ~0.1-0.3 s of Python start-up, which dominates the tiny presets' small files).
Training: a real 1-server/1-worker fleetrun job of the same preset, its record's samples_per_s
(examples consumed per second in the measured window, the same unit).
The target is steady reader >= 5x training. `full` runs the full model and batch on a limited number of
rows (--full-rows / --full-sentences) so that it takes about a minute.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import fleetbench  # noqa: E402,F401
from fleetbench import config, ps  # noqa: E402


def script(benchmark):
    import importlib
    return importlib.import_module(f"parameter_server.{benchmark}")


def preset_sets(benchmark, preset, args) -> list:
    if preset != "full":
        return []
    if benchmark == "ctr":
        return [f"synthetic_rows={args.full_rows}", "synthetic_files=4"]
    return [f"synthetic_sentences={args.full_sentences}", "synthetic_files=4"]


def files_and_pipe(benchmark, cfg):
    import paddle
    mod = script(benchmark)
    if benchmark == "ctr":
        files = mod.data_files(cfg)
    else:
        files = mod.word2vec.id_files(mod.data_dir(cfg))
    paddle.enable_static()
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
        work = mod.build(cfg)
    return files, work.pipe_command


def pipe_run(files, pipe_command, per_file: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        stats = os.path.join(tmp, "counts.jsonl")
        inputs = [[f] for f in files] if per_file else [files]
        tick = time.perf_counter()
        for group in inputs:
            cat = " ".join(f"'{f}'" for f in group)
            subprocess.run(f"cat {cat} | {pipe_command} --stats {stats} > /dev/null", shell=True, check=True)
        seconds = time.perf_counter() - tick
        counts = ps.read_pipe_counts(stats)
    lines = counts["valid"] + counts["invalid"]
    examples = counts.get("pairs", counts["valid"])
    return {"processes": len(inputs), "lines": lines, "seconds": seconds, "lines_per_s": lines / seconds,
            "examples_per_s": examples / seconds}


def reader_rate(files, pipe_command) -> dict:
    """steady: one pipe process over every file (the sustained rate, as on real multi-GB files);
    per_file: as Fleet runs it, one process per file in turn (one dataset thread), so each
    file pays the process start-up (python + imports)."""
    return {"steady": pipe_run(files, pipe_command, False), "per_file": pipe_run(files, pipe_command, True)}


def training_rate(benchmark, preset, sets, timeout) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "runs.jsonl")
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", os.path.join(tmp, "log"),
               "--server_num", "1", "--trainer_num", "1", str(REPO / "parameter_server" / f"{benchmark}.py"),
               "--preset", preset, "--results", store] + [a for kv in sets for a in ("--set", kv)]
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, GLOG_minloglevel="2", PYTHONWARNINGS="ignore"))
        if done.returncode != 0 or not os.path.exists(store):
            raise RuntimeError(f"{benchmark} {preset}: training run failed:\n{done.stdout[-2000:]}")
        metrics = json.loads(Path(store).read_text().splitlines()[-1])["metrics"]
    return {"examples_per_s": metrics["samples_per_s"], "throughput": metrics["throughput"],
            "unit": metrics["unit"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmarks", nargs="+", default=["ctr", "word2vec"])
    parser.add_argument("--presets", nargs="+", default=["tiny", "full"])
    parser.add_argument("--full-rows", type=int, default=60000, help="Criteo rows for the full preset")
    parser.add_argument("--full-sentences", type=int, default=20000, help="corpus sentences for full word2vec")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for benchmark in args.benchmarks:
        cls = script(benchmark).CTRConfig if benchmark == "ctr" else script(benchmark).Word2VecConfig
        for preset in args.presets:
            sets = preset_sets(benchmark, preset, args)
            cfg = config.build(benchmark, cls, preset, sets)
            files, pipe = files_and_pipe(benchmark, cfg)
            reader = reader_rate(files, pipe)
            train = training_rate(benchmark, preset, sets, args.timeout)
            row = {"benchmark": benchmark, "preset": preset, "sets": sets, "reader": reader, "training": train,
                   "ratio": reader["steady"]["examples_per_s"] / train["examples_per_s"],
                   "ratio_per_file": reader["per_file"]["examples_per_s"] / train["examples_per_s"]}
            rows.append(row)
            if not args.json:
                steady, per_file = reader["steady"], reader["per_file"]
                print(f"{benchmark:9s} {preset:5s} reader steady {steady['lines_per_s']:7.0f} lines/s "
                      f"{steady['examples_per_s']:7.0f} ex/s, per file {per_file['examples_per_s']:7.0f} ex/s "
                      f"({per_file['processes']} files) | training {train['examples_per_s']:7.0f} ex/s "
                      f"({train['throughput']:.0f} {train['unit']}) | reader/training steady "
                      f"{row['ratio']:5.1f}x {'ok' if row['ratio'] >= 5 else 'BELOW 5x'}, per file "
                      f"{row['ratio_per_file']:.1f}x", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if all(r["ratio"] >= 5 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
