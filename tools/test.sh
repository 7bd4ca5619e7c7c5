#!/usr/bin/env bash
# `make test`: the whole suite on Paddle 2.6.2, and the collective and core tests on 3.x.
#   usage: tools/test.sh PYTHON_2.6.2 PYTHON_3.x PYTEST_ARGS_FOR_3.x...
#
# The order, and why: (1) the 2.6.2 unit and job tiers alone; (2) the 2.6.2 root tier (emulated
# networks, SSH, Slurm, diagnose) with the 3.x tests beside it. Run one after the other the builds
# took 21-22 minutes, over CI's 20-minute budget. Beside each other: the root tier mostly waits
# (shaped links, sshd and slurmd start-ups) and runs its jobs inside network namespaces of its own,
# so it shares no port with the 3.x jobs on the host. The job tiers of both builds side by side
# were tried and are not done: a 2.6.2 parameter-server job hung once beside them (18:52 in all),
# and the 2.6.2 tier slowed from 14 to 18 minutes. The 3.x output is kept in a file and shown once
# the root tier ends, so two progress lines never interleave.
set -u
py2=$1 py3=$2
shift 2
mkdir -p log
log3=log/test-paddle3.log
tmp3=$(mktemp -d /tmp/fleetbench-test-paddle3.XXXXXX)

# the simulated GPU host's tier (tests/gpu_sim) runs here, its 3.x builds on the 3.x interpreter
FLEETBENCH_TEST_PADDLE3=$py3 "$py2" -m pytest -q --durations=20 -m "not root" tests
rc_jobs=$?

echo "tools/test.sh: the Paddle 3.x tests run beside the root tier; their output follows it (and stays in $log3)"
# -p no:cacheprovider: the two sessions would both rewrite .pytest_cache at their end.
"$py3" -m pytest -q --durations=20 -p no:cacheprovider --basetemp "$tmp3" "$@" >"$log3" 2>&1 &
pid3=$!
# A background job of a non-interactive shell ignores SIGINT, so Ctrl-C must be passed on by hand.
trap 'kill -TERM $pid3 2>/dev/null; wait $pid3; exit 130' INT TERM
# the root tier's Kubernetes 2x2 job runs in a "3.x image": this interpreter (tests/util.paddle3_python;
# as given, not resolved: a virtualenv's python is a symlink whose target has no Paddle)
FLEETBENCH_TEST_PADDLE3=$py3 "$py2" -m pytest -q --durations=20 -m root tests
rc_root=$?
wait $pid3
rc3=$?
trap - INT TERM
echo "---------------- Paddle $("$py3" -c 'import paddle; print(paddle.__version__)' 2>/dev/null) ($log3)"
cat "$log3"
[ $rc3 -eq 0 ] && rm -rf "$tmp3"
echo "tools/test.sh: Paddle 2.6.2 unit and job tiers exit $rc_jobs, root tier exit $rc_root; Paddle 3.x exit $rc3"
[ $rc_jobs -eq 0 ] && [ $rc_root -eq 0 ] && [ $rc3 -eq 0 ]
