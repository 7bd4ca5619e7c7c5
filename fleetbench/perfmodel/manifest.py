"""results/reference/manifest.yaml, the one list of the published tables the model reads: each
table's source, converter and role (fit: a constant was fitted on it; check: held out). Which
tables were fitted is read here and nowhere else (validate.FITTED_TABLES, node.PRIOR_TABLES,
hybrid_tables' roles)."""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import yaml

MANIFEST = Path(__file__).resolve().parents[2] / "results" / "reference" / "manifest.yaml"
ROLES = ("fit", "check")


@dataclasses.dataclass(frozen=True)
class Table:
    """One published table: `file` under results/reference/ (or, for a hybrid table, under
    fleetbench/presets/published/), where it comes from and what the model did with it."""
    file: str
    role: str
    source: str | None = None
    url: str | None = None
    commit: str | None = None
    converter: str | None = None
    key: str | None = None
    node_prior: bool = False

    @property
    def name(self) -> str:
        """The records' source.name: the file without its suffix."""
        return self.file.rsplit(".", 1)[0]


def _tables(section: dict, where: str) -> dict[str, Table]:
    out = {}
    for file, entry in (section or {}).items():
        table = Table(file=file, **entry)
        if table.role not in ROLES:
            raise ValueError(f"{where}: {file}: role {table.role!r} (expected one of {', '.join(ROLES)})")
        out[file] = table
    return out


@functools.lru_cache(maxsize=None)
def load(path: Path = MANIFEST) -> tuple[dict[str, Table], dict[str, Table]]:
    """(reference tables, hybrid tables), each {file: Table}."""
    data = yaml.safe_load(Path(path).read_text())
    return _tables(data["tables"], str(path)), _tables(data["hybrid_tables"], str(path))


def reference_tables() -> dict[str, Table]:
    return load()[0]


def hybrid_tables() -> dict[str, Table]:
    return load()[1]


def fitted() -> frozenset[str]:
    """Names of the reference tables a constant of the model was fitted on."""
    return frozenset(t.name for t in reference_tables().values() if t.role == "fit")


def node_prior() -> frozenset[str]:
    """Names of the reference tables the node-sharing prior was fitted on."""
    return frozenset(t.name for t in reference_tables().values() if t.node_prior)


def hybrid_role(file: str) -> str:
    """fit or check, of a hybrid table (fleetbench/presets/published/FILE)."""
    return hybrid_tables()[file].role
