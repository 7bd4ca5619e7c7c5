"""The launcher-rank contract (fleetbench.measure.contract): what a launcher writes is what a rank
reads, a malformed variable is one line naming it, and no module but the contract spells a name."""
import re

import pytest

from util import REPO

from fleetbench.measure import contract
from fleetbench.measure.contract import ContractError, RankContract, RunIdentity


def test_what_a_launcher_writes_a_rank_reads_back():
    said = RankContract(nodes=3, launch={"executor": "ssh", "hosts": ["a", "b", "c"]},
                        network={"profile": "1gbe", "rate_gbit": 1.0}, attempt={"attempt": 2, "retried_after": "x"},
                        job_id="j1", stopped_file="/tmp/s", supervisor="boot:1:2", threads="4",
                        threads_by="fleetbench sweep", local_procs=2)
    env = said.to_env()
    assert all(name.startswith("FLEETBENCH_") and isinstance(value, str) for name, value in env.items())
    assert RankContract.from_env(env) == said
    assert RankContract.from_env(env).launch_block() == {"executor": "ssh", "hosts": ["a", "b", "c"],
                                                         "attempt": 2, "retried_after": "x"}


def test_unsaid_fields_write_nothing_and_read_as_none():
    assert RankContract().to_env() == {}
    assert RankContract.from_env({}) == RankContract()
    assert RankContract(launch={"executor": "local", "hosts": ["h"]}).launch_block() == {
        "executor": "local", "hosts": ["h"]}  # no attempt: the block as given


@pytest.mark.parametrize("name, value, message", [
    (contract.NODES, "two", "FLEETBENCH_NODES: expected a whole number >= 1, got 'two'"),
    (contract.NODES, "0", "FLEETBENCH_NODES: expected a whole number >= 1, got '0'"),
    (contract.LAUNCH, "[1]", "FLEETBENCH_LAUNCH: expected a JSON object, got '[1]'"),
    (contract.NETWORK, "10gbe", "FLEETBENCH_NETWORK: expected a JSON object, got '10gbe'"),
])
def test_a_malformed_variable_is_one_line_naming_it(name, value, message):
    with pytest.raises(ContractError) as caught:
        RankContract.from_env({name: value})
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_an_identity_takes_network_and_launch_from_the_contract_only_where_it_leaves_them_out():
    identity = RunIdentity(benchmark="resnet50", mode="collective", method="bsp", preset="tiny", config={},
                           nodes=2, devices_per_node=1, world_size=2)
    said = RankContract(network={"profile": "10gbe"}, launch={"executor": "netns", "hosts": ["n0", "n1"]})
    assert identity.resolved(said).network == {"profile": "10gbe"}
    assert identity.resolved(said).launch == {"executor": "netns", "hosts": ["n0", "n1"]}
    own = RunIdentity(**dict(vars(identity), launch={"executor": "ssh", "hosts": ["a", "b"]}))
    assert own.resolved(said).launch == {"executor": "ssh", "hosts": ["a", "b"]}


def test_only_the_contract_spells_the_variables_names():
    names = [v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)]
    spelled = re.compile("|".join(re.escape(f'"{n}"') for n in names))
    offenders = [f"{p.relative_to(REPO)}:{i}" for p in sorted((REPO / "fleetbench").rglob("*.py"))
                 if p.name != "contract.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if spelled.search(line)]
    assert offenders == []
