"""The benchmark registry: every benchmark fleetbench knows, and where the repository's parts live.

Adding a benchmark is one script plus one line in BENCHMARKS (and its presets file). Sweeps,
`fleetbench launch`, the scripts' own command line and the report find benchmarks here and
nowhere else. Imports nothing heavy: the launcher and the report read it without paddle.
"""
import dataclasses
from pathlib import Path

from fleetbench import cmdline

REPO_ROOT = Path(__file__).resolve().parents[2]
PRESET_DIR = REPO_ROOT / "fleetbench" / "presets"
SWEEP_DIR = PRESET_DIR / "sweeps"
DEFAULT_RESULTS = "results/runs.jsonl"
FAMILIES = ("collective", "ps", "comm")  # the record's `mode`
METHOD_KEY = {"collective": "method", "ps": "mode", "comm": "op"}  # config key a sweep's `method` sets
# Conventional method name of a plain single-device run: the baseline of every method of its
# benchmark when no 1-device run of the method itself exists (aggregate's `baseline_for`).
SINGLE = "single"
# The method of the no-synchronisation control run (docs/guide/explain.md): a measurement of compute,
# never a training result nor an efficiency baseline.
CONTROL = "none"


@dataclasses.dataclass(frozen=True)
class Benchmark:
    name: str
    script: str  # relative to REPO_ROOT
    family: str  # one of FAMILIES
    unit: str  # what metrics.throughput counts

    @property
    def path(self) -> Path:
        return REPO_ROOT / self.script

    @property
    def presets(self) -> Path:
        return PRESET_DIR / f"{self.name}.yaml"


# A model trained both ways (collective all-reduce and parameter server) is one name with a script
# in each family: its records pair cell by cell (same benchmark, unit and presets file; `mode`
# tells them apart), which is all `fleetbench report` needs to draw them side by side (report/arch).
REGISTERED = (
    Benchmark("resnet50", "collective/resnet50.py", "collective", "images/s"),
    Benchmark("vgg16", "collective/vgg16.py", "collective", "images/s"),
    Benchmark("bert_large", "collective/bert_large.py", "collective", "tokens/s"),
    Benchmark("transformer", "collective/transformer.py", "collective", "tokens/s"),
    Benchmark("mnist", "collective/mnist.py", "collective", "images/s"),
    Benchmark("ctr", "parameter_server/ctr.py", "ps", "examples/s"),
    Benchmark("word2vec", "parameter_server/word2vec.py", "ps", "words/s"),
    Benchmark("comm", "collective/comm.py", "comm", "GB/s"),
    Benchmark("ctr", "collective/ctr.py", "collective", "examples/s"),
    Benchmark("resnet18", "collective/resnet18.py", "collective", "images/s"),
    Benchmark("resnet18", "parameter_server/resnet18.py", "ps", "images/s"),
    Benchmark("gpt", "collective/gpt.py", "collective", "tokens/s"),
)
# name -> its first registered script (what a sweep cell runs unless it names `script:`)
BENCHMARKS = {}
for _bench in REGISTERED:
    BENCHMARKS.setdefault(_bench.name, _bench)


class UnknownBenchmark(cmdline.UserError):
    """str(err) is one line naming the benchmark and the known ones."""


def get(name: str, family: str | None = None) -> Benchmark:
    """A benchmark by name; with `family`, its script in that family."""
    if name not in BENCHMARKS:
        raise UnknownBenchmark(f"unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
    if family is None:
        return BENCHMARKS[name]
    found = next((b for b in REGISTERED if b.name == name and b.family == family), None)
    if found is None:
        families = sorted(b.family for b in REGISTERED if b.name == name)
        raise UnknownBenchmark(f"benchmark {name!r} has no {family} script (families: {', '.join(families)})")
    return found


def families(name: str) -> list:
    """The families that have a script of benchmark `name` (two for a model trained both ways)."""
    return [b.family for b in REGISTERED if b.name == name]


def for_script(script) -> Benchmark | None:
    """The registered benchmark a script path is, or None (a user's own script)."""
    try:
        resolved = Path(script).resolve()
    except OSError:
        return None
    return next((b for b in REGISTERED if b.path == resolved), None)


def name_for_script(script) -> str:
    """A script's registered name, else its file's stem (a script outside the registry, such as
    a test's own probe, still gets records named after it)."""
    bench = for_script(script)
    return bench.name if bench else Path(script).stem


# Trainable gradients of a benchmark's model at a preset: (bytes in float32, tensors). Computed
# once from the Paddle model definitions (collective/<name>.py at that preset's config); what a
# GPU or published record lacks is read here. tests/job/test_grad_sizes.py rebuilds the models
# and checks every entry.
GRADIENTS = {
    ("resnet50", "full"): (102_228_128, 161),  # 25.56 M parameters
    ("bert_large", "full"): (1_344_904_432, 398),  # BERT-Large, 336.2 M
    ("bert_large", "base"): (439_246_064, 206),  # BERT-Base, 109.8 M
}


def gradients(name: str, preset: str | None) -> tuple[int, int] | None:
    """(gradient bytes, gradient tensors) of benchmark `name` at `preset` (None: full), or None."""
    return GRADIENTS.get((name, preset or "full"))
