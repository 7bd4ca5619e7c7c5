"""Typed benchmark configs, YAML presets and `--set key=value` overrides.

Each benchmark declares a dataclass whose defaults are its `full` configuration; a preset in
`fleetbench/presets/<benchmark>.yaml` overrides only what differs (optionally `extends:` another
preset). Every mistake is a ConfigError with a one-line message naming the key, raised before any
training process does work.
"""
import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any, Optional

import yaml

from fleetbench import cmdline
from fleetbench.measure.registry import PRESET_DIR


class ConfigError(cmdline.UserError):
    """A bad configuration value; str(err) is a one-line message naming the key."""


def require(ok: bool, key: str, expectation: str, value: Any) -> None:
    """Raise the one-line ConfigError `config key 'KEY' EXPECTATION (got VALUE)` unless ok."""
    if not ok:
        raise ConfigError(f"config key '{key}' {expectation} (got {value!r})")


@dataclasses.dataclass
class DataConfig:
    path: Optional[str] = None  # None: synthetic data generated in memory
    # a held-out split evaluated after every epoch (image benchmarks: an ImageNet-style folder of
    # the training folder's classes); set, the run trains by epochs (fleetbench.train.epochs)
    val_path: Optional[str] = None
    num_workers: int = 2  # DataLoader worker processes (or dataset threads for PS)
    strict: bool = False  # stop at the first invalid input line instead of skipping it


@dataclasses.dataclass
class DebugConfig:
    """Test-only knobs; a record made with them says so in its config."""

    delay_rank: int = -1  # this rank sleeps delay_ms every step (to prove the slowest rank decides)
    delay_ms: float = 0.0


@dataclasses.dataclass
class MeasureConfig:
    """How a run is timed (docs/reference/metrics.md#steady-state-warm-up-and-the-windows-length); not part of the
    experiment (measure/repeats/experiment.NOISE_KEYS): the work a step does is the same, but for a
    parameter-server worker's breakdown marks (experiment.WORK_IN_FAMILY)."""

    probe: bool = True  # time machine/speed's fixed workload at the measured window's edges
    # a parameter-server worker's step taken apart by py_func marks in its program (train/ps/marks.py);
    # off by default: a mark costs 63 us (bench/py_func_cost.py), 6 of them 5.8%
    # of a CTR tiny step, over the 2% the suite may add; `--trace` turns them on (its spans are theirs)
    breakdown: bool = False
    # warm-up goes on past warmup_steps until the step time settles (timing.settled), at most this
    # many steps in all; 0 (or <= warmup_steps): exactly warmup_steps
    settle_steps: int = 0
    # > 0: the measured window is calibrated from the settled step time to last this many seconds
    # (timing.calibrated_steps; collective loops by steps only); 0: the preset's fixed step count
    window_s: float = 0.0
    # a CPU rank's fp32 GEMM for its MFU's peak, timed after training (train/trace.py): the fastest
    # of 3 trials of peak_s / 3; the tiny presets ask for less (a run of a second or two; the test
    # suite's budget: 0.45 s less on every core of every collective job)
    peak_s: float = 0.6


@dataclasses.dataclass
class BenchConfig:
    """What every benchmark has; a family adds how long a run is (collective: steps, PS: passes)."""

    seed: int = 2021
    batch_size: int = 32  # per device
    warmup_steps: int = 10  # run, then excluded from every figure
    log_every: int = 10
    lr: float = 0.1
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    debug: DebugConfig = dataclasses.field(default_factory=DebugConfig)
    measure: MeasureConfig = dataclasses.field(default_factory=MeasureConfig)

    def validate(self) -> None:
        require(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
        require(self.warmup_steps >= 0, "warmup_steps", "must be >= 0", self.warmup_steps)
        require(self.log_every > 0, "log_every", "must be > 0", self.log_every)
        require(self.lr > 0, "lr", "must be > 0", self.lr)
        require(self.data.num_workers >= 0, "data.num_workers", "must be >= 0", self.data.num_workers)
        require(self.debug.delay_ms >= 0, "debug.delay_ms", "must be >= 0", self.debug.delay_ms)
        require(self.measure.settle_steps >= 0, "measure.settle_steps", "must be >= 0", self.measure.settle_steps)
        require(self.measure.window_s >= 0, "measure.window_s", "must be >= 0 seconds", self.measure.window_s)
        require(self.measure.peak_s > 0, "measure.peak_s", "must be > 0 seconds", self.measure.peak_s)


@dataclasses.dataclass
class CollectiveConfig(BenchConfig):
    steps: int = 110  # total steps including warm-up
    # Gradient communication method, see fleetbench.train.methods and the README's table.
    method: str = "mgwfbp"
    comm_buffer_mb: float = 25.0  # bucket size for mgwfbp (Paddle's DataParallel comm_buffer_size)
    grad_merge_steps: int = 4  # micro-steps per all-reduce for method=grad_merge
    amp: str = "off"  # off | fp16 | bf16 (GPU only)
    # O1: fp32 weights, listed ops in half precision; O2: half-precision weights with fp32 master
    # copies in the optimizer (Paddle's "pure" fp16/bf16, paddle.amp.decorate). fleetbench.train.amp
    amp_level: str = "O1"

    def validate(self) -> None:
        super().validate()
        self.check_length()
        require(self.amp in ("off", "fp16", "bf16"), "amp", "must be off, fp16 or bf16", self.amp)
        require(self.amp_level in ("O1", "O2"), "amp_level", "must be O1 or O2", self.amp_level)
        require(self.amp_level == "O1" or self.amp != "off", "amp_level", "O2 needs amp=fp16 or amp=bf16",
                self.amp_level)
        require(self.comm_buffer_mb > 0, "comm_buffer_mb", "must be > 0", self.comm_buffer_mb)
        require(self.grad_merge_steps >= 1, "grad_merge_steps", "must be >= 1", self.grad_merge_steps)

    def check_length(self) -> None:
        """The run's length; a benchmark whose data decides it (whole passes) overrides this."""
        require(self.steps > self.warmup_steps, "steps", f"must be > warmup_steps ({self.warmup_steps})", self.steps)


# ---------------------------------------------------------------- typed assignment
def _field_types(obj) -> dict:
    hints = typing.get_type_hints(type(obj))
    return {f.name: hints[f.name] for f in dataclasses.fields(obj)}


def _coerce(kind, value, key: str):
    """Convert a YAML/CLI value to the declared field type, or raise a one-line ConfigError."""
    optional = typing.get_origin(kind) is typing.Union and type(None) in typing.get_args(kind)
    if optional:
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "~")):
            return None
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value, 10)
            except ValueError:
                pass
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"config key '{key}' expects {getattr(kind, '__name__', kind)} (got {value!r})")


def assign(cfg, key: str, value, source: str = "--set") -> None:
    """Set a dotted key (e.g. `data.path`) on a config, typed by its dataclass field."""
    target, parts = cfg, key.split(".")
    for depth, part in enumerate(parts):
        types = _field_types(target)
        if part not in types:
            known = ", ".join(sorted(types))
            where = ".".join(parts[: depth + 1])
            raise ConfigError(f"{source}: unknown config key '{where}' (known here: {known})")
        if depth == len(parts) - 1:
            if dataclasses.is_dataclass(types[part]):
                raise ConfigError(f"{source}: config key '{key}' is a group; set one of its fields")
            setattr(target, part, _coerce(types[part], value, key))
        else:
            target = getattr(target, part)
            if not dataclasses.is_dataclass(target):
                raise ConfigError(f"{source}: config key '{'.'.join(parts[:depth + 1])}' has no fields")


def _flatten(mapping: dict, prefix: str = ""):
    for key, value in mapping.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


# ---------------------------------------------------------------- presets
def load_presets(benchmark: str) -> dict:
    path = PRESET_DIR / f"{benchmark}.yaml"
    if not path.exists():
        raise ConfigError(f"{path}: no presets file for benchmark '{benchmark}'")
    try:
        presets = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(presets, dict) or not all(isinstance(v, dict) for v in presets.values()):
        raise ConfigError(f"{path}: expected a mapping of preset name -> mapping of overrides")
    return presets


def preset_overrides(benchmark: str, name: str) -> list:
    """The (key, value) overrides of a preset, `extends:` chains resolved, base first."""
    presets = load_presets(benchmark)
    chain, seen = [], set()
    while name is not None:
        if name not in presets:
            raise ConfigError(f"--preset: unknown preset '{name}' for {benchmark} "
                              f"(available: {', '.join(sorted(presets))})")
        if name in seen:
            raise ConfigError(f"--preset: preset '{name}' of {benchmark} extends itself")
        seen.add(name)
        body = dict(presets[name])
        name = body.pop("extends", None)
        chain.append(body)
    return [item for body in reversed(chain) for item in _flatten(body)]


def build(benchmark: str, cls, preset: str = "full", sets=()):
    """Resolve defaults <- preset <- --set overrides, then validate."""
    cfg = cls()
    file = PRESET_DIR / f"{benchmark}.yaml"
    for key, value in preset_overrides(benchmark, preset):
        assign(cfg, key, value, source=f"{file} [{preset}]")
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set: expected key=value (got {item!r})")
        assign(cfg, setting_key(item), raw.strip())
    try:
        cfg.validate()
    except ConfigError:
        raise
    except ValueError as err:  # a data reader's one-line error (datasets.DataError) found by a check
        raise ConfigError(str(err)) from None
    except OSError as err:  # a data file a check could not read
        raise ConfigError(f"{err.filename}: {err.strerror}") from None
    return cfg


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


# ---------------------------------------------------------------- command line
def setting_key(item: str) -> str:
    """The config key a `--set KEY=VALUE` item sets."""
    return item.partition("=")[0].strip()


def _setting(text: str) -> str:
    key, sep, _value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(text)
    return text


SETTING = cmdline.Kind("KEY=VALUE, e.g. batch_size=64", _setting, ("", "batch_size", "=3"))


def exit_config_error(benchmark: str, err: Exception | str) -> None:
    """A benchmark script's refusal (its config, data, a flag the parser cannot check): one line, exit 2."""
    sys.exit(cmdline.refused(benchmark, err))
