"""The values of `--predict` and `--validate` specs, checked one key at a time: a bad value is a
SpecError (one line naming the flag, the key and what was expected) before anything is predicted.
A benchmark or network a spec names must be one the records hold or fleetbench knows (the
registry, the emulator's profiles): `unknown`. Method and preset filters are not checked: one that
matches no record predicts nothing, which the output shows."""
from __future__ import annotations

import math

from fleetbench import cmdline
from fleetbench.perfmodel import links

NAMED = ("benchmark", "network")


class SpecError(cmdline.UserError):
    """A bad --predict or --validate value; one line naming the flag."""


def _number(text: str) -> float:
    """The number `text` says, nan when it says none (nan and inf are refused as no number)."""
    try:
        return float(text)
    except ValueError:
        return float("nan")


def value(key: str, text: str, where: str):
    """The value of `key` parsed and checked; `where` names the flag and spec for the message."""
    if key == "rate_gbit":
        rate = _number(text)
        if not math.isfinite(rate) or rate <= 0:
            raise SpecError(f"{where}: rate_gbit must be a number of Gbit/s above 0 (got {text!r})")
        return rate
    if key == "efficiency":
        share = _number(text)
        if not (math.isfinite(share) and 0 < share <= 1):
            raise SpecError(f"{where}: efficiency must be a share of the rate in (0, 1] (got {text!r})")
        return share
    if key == "transport":
        if text not in links.TRANSPORTS:
            raise SpecError(f"{where}: transport must be one of {', '.join(links.TRANSPORTS)} (got {text!r})")
        return text
    return text


def unknown(spec: dict, known: dict, flag: str) -> None:
    """SpecError when a benchmark or network is unknown (`known`: key -> the names the records hold
    and fleetbench knows); a typo would otherwise predict nothing or find no link."""
    for key in NAMED:
        if key in spec and str(spec[key]) not in known.get(key, ()):
            choices = ", ".join(sorted(known.get(key, ()))) or "none"
            raise SpecError(f"{flag} {key}={spec[key]}: unknown (known: {choices})")
