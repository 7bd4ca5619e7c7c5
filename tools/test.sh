#!/usr/bin/env bash
# `make test`: the whole suite on Paddle 2.6.2, and the collective and core tests on 3.x.
#   usage: tools/test.sh PYTHON_2.6.2 PYTHON_3.x PYTEST_ARGS_FOR_3.x...
#
# Two passes of pytest sessions side by side, because one after the other the suite took 20-22 minutes
# on 2 cores (over the 20-minute budget) while using about one core on average: most tests wait on
# a Paddle launcher, a shaped link or an sshd start-up.
#   (1) the 2.6.2 unit and job tiers in two sessions: the launcher, parameter-server, architecture,
#       docs and GPT job files beside everything else. Every job picks free ports and its own
#       temporary directory, so sessions share nothing.
#   (2) four sessions: the 2.6.2 root tier (emulated networks, SSH, Slurm, diagnose), the 3.x tests,
#       the simulated GPU host's tier and four 2.6.2 job files moved from pass 1 (below). The root
#       tier runs its jobs inside network namespaces of its own, so it shares no port with the jobs
#       on the host.
# CPU, not waiting, is the budget now: each session's summary ends with the CPU it used and the
# JUnit XML holds each test's (tests/conftest.py; tools/test_times.py sums them by file). The fresh
# clone of 2026-11-29 took 32 minutes with its virtualenvs' install (1:50) and 43.5 CPU minutes;
# two cores cannot run that in under 22.
# The 2.6.2 parameter-server job files stay out of pass 2 (one hung once beside the 3.x job tier,
# not seen since; the late files are collective jobs). Each background session's output is kept in a
# file and shown once the foreground one ends, so two progress lines never interleave. Every session
# leaves a JUnit XML file in log/ (each test's time: tools/test_times.py sums them by file).
set -u
py2=$1 py3=$2
shift 2
mkdir -p log
# short: a job's TMPDIR under a test's directory holds Python's AF_UNIX sockets (multiprocessing's
# Manager in Paddle's gloo start-up), whose path may not pass 107 bytes
tmp=$(mktemp -d /tmp/fbt.XXXXXX)
pids=()
# A background job of a non-interactive shell ignores SIGINT, so Ctrl-C must be passed on by hand;
# and bash runs a trap only once its foreground command ends, so the foreground session runs as a
# waited-for background job too (`foreground`): a TERM stops every session at once (each pytest
# unwinds on it, tests/conftest.py), not after the foreground one's 10 minutes.
trap 'kill -TERM "${pids[@]}" ${fg:-} 2>/dev/null; wait; exit 130' INT TERM
foreground() {
    "$@" &
    fg=$!
    wait "$fg"
}

# pytest in the background, its output in log/NAME.log; -p no:cacheprovider: two sessions would
# both rewrite .pytest_cache at their end.
background() {
    local name=$1 dir=$2 py=$3
    shift 3
    "$py" -m pytest -q --durations=20 -p no:cacheprovider --junitxml "log/$name.xml" --basetemp "$tmp/$dir" "$@" >"log/$name.log" 2>&1 &
    pids+=($!)
}
show() {
    echo "---------------- $1 (log/$1.log)"
    cat "log/$1.log"
}

# (1) the job files that take longest, in the background; the rest in the foreground (less the
# files pass 2 takes: $late_jobs)
slow_jobs="tests/job/test_launch.py tests/job/test_ps.py tests/job/test_arch.py tests/job/test_docs.py tests/job/test_gpt.py"
late_jobs="tests/job/test_registered.py tests/job/test_breakdown.py tests/job/test_resnet50.py tests/job/test_grad_sizes.py"
ignore=()
for f in $slow_jobs $late_jobs; do ignore+=("--ignore=$f"); done
echo "tools/test.sh: pass 1, Paddle 2.6.2 unit and job tiers; $slow_jobs run beside, their output follows"
background test-launch-ps-arch a "$py2" -m "not root and not gpu_sim" $slow_jobs
FLEETBENCH_TEST_PADDLE3=$py3 foreground "$py2" -m pytest -q --durations=20 --junitxml log/test-rest.xml --basetemp "$tmp/b" -m "not root and not gpu_sim" "${ignore[@]}" tests
rc_rest=$?
wait "${pids[0]}"
rc_slow=$?
show test-launch-ps-arch

# (2) the root tier, beside the 3.x tests, the simulated GPU host (its 3.x builds on the 3.x
# interpreter) and the 2.6.2 job files of $late_jobs: the root tier waits on sshd, slurmd and
# shaped links more than it computes (242 CPU s in 670 s, 2026-11-29), so its pass has the cores
# to spare that pass 1 has not (1475 CPU s in 911 s). The root tier's Kubernetes 2x2 job runs in a
# "3.x image": this interpreter, tests/util.paddle3_python, as given, not resolved: a
# virtualenv's python is a symlink whose target has no Paddle.
echo "tools/test.sh: pass 2, the root tier; the Paddle 3.x tests, the simulated GPU host and $late_jobs run beside, their output follows"
background test-paddle3 3 "$py3" "$@"
FLEETBENCH_TEST_PADDLE3=$py3 background test-gpu-sim g "$py2" -m gpu_sim tests/gpu_sim
FLEETBENCH_TEST_PADDLE3=$py3 background test-late l "$py2" -m "not root and not gpu_sim" $late_jobs
FLEETBENCH_TEST_PADDLE3=$py3 foreground "$py2" -m pytest -q --durations=20 --junitxml log/test-root.xml --basetemp "$tmp/r" -m "root and not gpu_sim" tests
rc_root=$?
wait "${pids[1]}"
rc3=$?
wait "${pids[2]}"
rc_sim=$?
wait "${pids[3]}"
rc_late=$?
trap - INT TERM
show test-gpu-sim
show test-late
echo "---------------- Paddle $("$py3" -c 'import paddle; print(paddle.__version__)' 2>/dev/null)"
show test-paddle3
echo "tools/test.sh: Paddle 2.6.2 unit and job tiers exit $rc_rest (launch, ps, arch: $rc_slow; registered, breakdown, resnet50: $rc_late), root tier exit $rc_root, simulated GPU host exit $rc_sim; Paddle 3.x exit $rc3"
if [ $rc_rest -eq 0 ] && [ $rc_slow -eq 0 ] && [ $rc_late -eq 0 ] && [ $rc_root -eq 0 ] && [ $rc_sim -eq 0 ] && [ $rc3 -eq 0 ]; then
    rm -rf "$tmp"
    exit 0
fi
echo "tools/test.sh: temporary directories kept in $tmp"
exit 1
