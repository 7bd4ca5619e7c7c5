import os
import resource
import signal
import sys
from pathlib import Path

import pytest

# Tests import helpers from tests/util.py and the repo's packages without installing them.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

# A skipped test did not run. Under CI (CI=true) a skip fails the test, naming what was missing,
# unless the test is marked `paddle_build`: it depends on what the Paddle build under test can do
# (the parameter-server tests under Paddle 3.x), which no install step can change; or
# `machine_feature`: it needs what the kernel has or lacks (a cgroup v1 cpu controller), likewise.
STRICT = os.environ.get("CI", "").lower() == "true"


def _stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    # A session told to stop (tools/test.sh passes a TERM on; CI's timeout sends one) unwinds as on
    # Ctrl-C: the running test's subprocess calls kill their child and every fixture tears down, so
    # no job a test started runs on. Python's default TERM ends the process at once, finalizers
    # unrun: a killed `make test` left its tests' launches running and starting no new ones only
    # because their session was gone (2026-11-28).
    signal.signal(signal.SIGTERM, _stop)
    config.addinivalue_line("markers", "paddle_build: may skip when the installed Paddle build cannot "
                                       "run it (allowed under CI)")


# Tiers by directory: tests/job/ starts real multi-process runs (Paddle jobs, fleetbench launch/sweep),
# tests/root/ needs root (namespaces, tc, sshd, slurmd), tests/gpu_sim/ runs the README's GPU commands
# on the simulated GPU host (its tests that need root carry @pytest.mark.root as well). The markers
# themselves are registered in pyproject.toml; a test elsewhere that starts a real job carries
# @pytest.mark.job itself.
TIERS = {"job": "job", "root": "root", "gpu_sim": "gpu_sim"}

# Files whose tests exercise fleetbench's own logic the same way whatever Paddle build is installed
# (sweep YAML and resume, generated Kubernetes documents, documented commands, charts, the bad-input
# matrix), marked
# `build_neutral`: `make test` runs them on 2.6.2 only, which keeps the whole run under 20 minutes.
# Single tests that check fleetbench's logic inside a file that otherwise meets Paddle carry
# @pytest.mark.build_neutral themselves, with the reason beside it.
# A file belongs here only if what its tests check is fleetbench's, not Paddle's: a sweep test may
# train a tiny cell to test resume, but what it asserts is the sweep's bookkeeping.
BUILD_NEUTRAL = {"test_k8s_crd.py", "test_k8s.py", "test_k8s_shape.py", "test_docs.py", "test_sweep.py",
                 "test_plot.py", "test_html_report.py", "test_bad_input.py",
                 # the results database, its gate and explained changes: records in, text out
                 "test_store.py", "test_gate.py", "test_history_explained.py", "test_circumstances.py",
                 # the loss breakdown over records (its one job makes two records to explain) and the
                 # sweep's stability policy: the collective family's records on 3.x are tested elsewhere
                 "test_explain.py", "test_sweep_stable.py",
                 # the performance models, the published tables and the code's shape: arithmetic over
                 # records and files, whichever Paddle is installed
                 "test_ps_predict.py", "test_cloud_links.py", "test_reference_tables.py", "test_plan.py",
                 "test_structure.py", "test_sweep_order.py", "test_history.py", "test_steady_probe.py",
                 "test_compare.py"}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(here).parts
        if parts and parts[0] in TIERS:
            item.add_marker(TIERS[parts[0]])
        if parts and parts[-1] in BUILD_NEUTRAL:
            item.add_marker("build_neutral")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and not hasattr(report, "wasxfail") \
            and item.get_closest_marker("paddle_build") is None and item.get_closest_marker("machine_feature") is None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where every test must run: {reason}"


def _cpu() -> tuple[float, float]:
    """CPU seconds so far: (pytest's own, its finished subprocesses')."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


# Each test's CPU (pytest's own and its finished subprocesses'), from its setup to the end of its
# teardown, kept in the JUnit XML as the property cpu_s: tools/test_times.py sums it by file,
# which is what 2 cores can share. (Added to the item before the teardown's report is made: a
# report copies the item's properties when it is made.)
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.cpu_start = sum(_cpu())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and hasattr(item, "cpu_start"):
        item.user_properties.append(("cpu_s", round(sum(_cpu()) - item.cpu_start, 2)))
    yield


def pytest_terminal_summary(terminalreporter):
    # The CPU the session used, its own and its finished subprocesses' (each job's launcher, ranks and
    # servers are waited for): make test's budget is 2 cores, so where CPU goes decides how its
    # sessions can share them (tools/test.sh); wall times alone hide it.
    own, kids = _cpu()
    terminalreporter.write_line(f"session CPU: {own:.0f} s in pytest, {kids:.0f} s in its subprocesses")
