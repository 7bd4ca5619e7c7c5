"""What the flags of `fleetbench k8s` take, checked as the Kubernetes API server and Kubeflow's
operator would check the fields they become (engines/k8s.py writes the manifests): resource
quantities, DNS labels, a container image reference, the job's shape. Each is a cmdline.Kind, so
the bad-input matrix (tests/unit/test_bad_input.py) tries the inputs it refuses."""
from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

from fleetbench import cmdline
from fleetbench.hosts import hostlist
from fleetbench.measure import registry

DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# Kubernetes quantities (k8s.io/apimachinery resource.Quantity): a number, then a binary suffix
# (Ki .. Ei), a decimal one (n u m k M G T P E) or an exponent (e3).
QUANTITY_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
SCALES = {**{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
          **{s: Decimal(10) ** e for s, e in zip("numkMGTPE", (-9, -6, -3, 3, 6, 9, 12, 15, 18))}}


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity's value ('32Gi', '500m', '1e3', '8'); ValueError if it is none."""
    m = QUANTITY_RE.fullmatch(str(text))
    if not m:
        raise ValueError(text)
    suffix = m.group(2) or ""
    scale = Decimal(10) ** int(suffix[1:]) if suffix[:1] in ("e", "E") else SCALES.get(suffix, Decimal(1))
    return Decimal(str(text)[:m.start(2)] if suffix else str(text)) * scale


def _cpu(text: str) -> str:
    if quantity(text) <= 0:
        raise ValueError(text)
    return text


def _memory(text: str) -> str:
    value = quantity(text)  # the API server warns on a fractional byte count ("500m"), and 0 is no limit
    if value < 1 or value != value.to_integral_value():
        raise ValueError(text)
    return text


def _label(pattern: re.Pattern, length: int) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if not pattern.fullmatch(text) or len(text) > length:
            raise ValueError(text)
        return text
    return convert


def _what(text: str) -> str:
    if text.endswith((".yaml", ".yml")):
        problem = cmdline.input_file_problem(text)
        if problem:
            raise cmdline.Refused(f"{text}: {problem} (expected a sweep file)")
        return text
    if text not in registry.BENCHMARKS:
        raise cmdline.Refused(f"{text!r}: unknown benchmark (expected one of {', '.join(registry.BENCHMARKS)}, "
                              "or a sweep file .yaml)")
    return text


def _servers_workers(text: str) -> str:
    servers, workers = (int(x) for x in text.split("/"))
    if servers < 1 or workers < 1:
        raise ValueError(text)
    return text


def _per_node(text: str) -> str:
    try:
        hostlist.parse_per_node(text)
    except hostlist.HostsError:
        raise ValueError(text) from None
    return text


CPU = cmdline.Kind("a Kubernetes CPU quantity > 0 like 8 or 500m", _cpu, ("lots", "", "0", "-2", "8 cores"))
MEMORY = cmdline.Kind("a Kubernetes memory quantity of whole bytes like 32Gi or 512M", _memory,
                      ("lots", "", "0", "-1Gi", "500m", "32GB"))
JOB_NAME = cmdline.Kind("a DNS-1035 label of at most 50 characters (lowercase letters, digits, '-')",
                        _label(DNS1035, 50), ("", "Bad_Name", "-x", "x" * 51))
NAMESPACE = cmdline.Kind("a DNS-1123 label (lowercase letters, digits, '-')",
                         _label(re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"), 63), ("", "Bad_Space", "x" * 64))
# a container image reference as Docker's grammar has it: [registry[:port]/]path[:tag][@digest]
IMAGE = cmdline.Kind("a container image like registry.example.com/fleetbench:1.0", _label(re.compile(
    r"(?:(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)(?::\d+)?/|[A-Za-z0-9-]+:\d+/)?"  # a registry has a '.' or a port
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*:[0-9a-fA-F]{32,})?"),
    255), ("", "Bad Image", "UPPER/x", "x:"))
WHAT = cmdline.Kind("a benchmark name or a sweep file (.yaml)", _what, ("nosuch", cmdline.MISSING + ".yaml"))
PER_NODE = cmdline.Kind("a process count >= 1", _per_node, ("0", "abc", "", "-1"))
SERVERS_WORKERS = cmdline.Kind("SERVERS/WORKERS like 2/2, at least 1 of each", _servers_workers,
                               ("2", "0/2", "2/0", "a/b", ""))
