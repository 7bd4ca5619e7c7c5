"""A result record stamped with the machine it ran on. The store (`store/results.make_record`)
makes a record from values; collecting the environment and topology runs tools and reads the
process's thread record, so it is done here, above measure/ (which stays the bottom room)."""
from __future__ import annotations

import fleetbench
from fleetbench.machine import env, topology
from fleetbench.measure.contract import RunIdentity
from fleetbench.store import results


def record(identity: RunIdentity, metrics: dict | None, error: str | None = None) -> dict:
    """A complete schema-1 record of a run in this process (see results.make_record), with this
    machine's environment (threads included) and GPU topology."""
    return results.make_record(identity, metrics, error, env=env.collect(threads=fleetbench.threads_info()),
                               topology=topology.detect_for_record())
