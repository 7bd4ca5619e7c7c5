#!/usr/bin/env bash
# `make test`: the whole suite on Paddle 2.6.2, and the collective and core tests on 3.x.
#   usage: tools/test.sh PYTHON_2.6.2 PYTHON_3.x -m MARKS PATHS...   (the last: the 3.x selection)
#
# Pytest sessions side by side. Most tests wait on a Paddle launcher, a shaped link or an sshd
# start-up, so one session uses under one core, and the suite's CPU (33-37 CPU minutes) needs
# 17-18 minutes of two cores packed perfectly; the budget is 20. Sessions that wait sit beside
# sessions that compute from the start to the end, in two phases:
#   (1) the root tier's measuring files, whose verdicts are the machine's figures (diagnose judges
#       a CPU-starved node against its peers; the probe names a run under a CPU quota), while the
#       machine is least loaded: beside the 3.x install and the launcher's fault tests (jobs-b);
#   (2) once they end: the rest, in eight sessions (2.6.2's unit and job tiers in two more, the root
#       tier's clusters and its other files, the simulated GPU host, the documented commands, 3.x in two).
# Every job picks free ports, its own temporary directory and (emulated clusters) its own subnet
# under a machine-wide lock, so sessions share nothing. Files that share a session's cached run
# (util.two_rank_run: registered, resnet50, mnist, arch) stay in one session.
# Measured (tools/test_times.py on the JUnit XML each session leaves in log/: each test's wall and
# CPU seconds, tests/conftest.py): fresh clones of 2026-11-29 with three sessions then two, 25:24
# and 25:25 (34.9 and 34.7 CPU minutes); four then five, 24:10 (37.0: more sessions, more CPU), and
# diagnose's starved node read as memory-bound beside five sessions (hence phase 1).
# A session's output is kept in log/NAME.log and shown at the end, so progress lines never
# interleave; a line says when each session ends.
set -u
py2=$1 py3=$2
shift 2
p3_marks=$2  # "$@" is -m MARKS PATHS... (the Makefile's PADDLE3_SELECT)
mkdir -p log
# short: a job's TMPDIR under a test's directory holds Python's AF_UNIX sockets (multiprocessing's
# Manager in Paddle's gloo start-up), whose path may not pass 107 bytes
tmp=$(mktemp -d /tmp/fbt.XXXXXX)
pids=() names=() shown=() failed=()
# A background job of a non-interactive shell ignores SIGINT, so Ctrl-C is passed on by hand; `wait`
# returns on a trapped signal, so a TERM stops every session at once (each pytest unwinds on it,
# tests/conftest.py).
trap 'kill -TERM "${pids[@]}" ${installer:-} 2>/dev/null; wait; exit 130' INT TERM

# session NAME PYTHON PYTEST_ARGS...: one pytest session in the background, its output in log/NAME.log
# (-p no:cacheprovider: two sessions would both rewrite .pytest_cache at their end)
session() {
    local name=$1 py=$2
    shift 2
    FLEETBENCH_TEST_PADDLE3=$py3 "$py" -m pytest -q --durations=20 -p no:cacheprovider --junitxml "log/$name.xml" \
        --basetemp "$tmp/$name" "$@" >"log/$name.log" 2>&1 &
    pids+=($!)
    names+=("$name")
    shown+=("$name")
}

# ended I RC: session I has ended with RC: said, and taken off the running list
ended() {
    echo "tools/test.sh: ${names[$1]} ended after $SECONDS s, exit $2"
    [ "$2" -eq 0 ] || failed+=("${names[$1]}")
    unset "pids[$1]" "names[$1]"
}

# wait_session NAME: wait for that session alone
wait_session() {
    local i
    for i in "${!names[@]}"; do
        if [ "${names[$i]}" = "$1" ]; then
            wait "${pids[$i]}"
            ended "$i" $?
            return
        fi
    done
}

# finish: wait for every running session (a line as each ends), then show every session's output
finish() {
    local done_pid rc i
    while [ ${#pids[@]} -gt 0 ]; do
        wait -n -p done_pid "${pids[@]}"
        rc=$?
        [ -n "${done_pid:-}" ] || break  # nothing left to wait for (not expected)
        for i in "${!pids[@]}"; do
            if [ "${pids[$i]}" = "$done_pid" ]; then
                ended "$i" "$rc"
            fi
        done
    done
    for name in "${shown[@]}"; do
        echo "---------------- $name (log/$name.log)"
        cat "log/$name.log"
    done
}

# ignore FILE...: --ignore=FILE for each (the catch-all sessions skip the files other sessions run)
ignore() {
    local f
    for f in "$@"; do echo "--ignore=$f"; done
}

# The files of the sessions that are not catch-alls, balanced by their measured wall time; the
# catch-alls (unit-jobs-a, root-b, paddle3-a) take every other file, so a new one runs somewhere.
root_measure="tests/root/test_diagnose.py tests/root/test_probe_quota.py"
jobs_b="tests/job/test_launch.py tests/job/test_grad_sizes.py tests/job/test_blame.py tests/unit/test_explain.py
        tests/unit/test_plot.py tests/unit/test_k8s.py"
jobs_c="tests/job/test_registered.py tests/job/test_resnet50.py tests/unit/test_mnist.py tests/job/test_arch.py
        tests/job/test_ps.py tests/job/test_diagnose_probe.py tests/job/test_k8s_operator.py"
docs="tests/job/test_docs.py"  # phase 2: it runs documented 3.x commands
root_a="tests/root/test_slurm.py tests/root/test_ssh_cluster.py tests/root/test_netem_cluster.py
        tests/root/test_launch_promises.py tests/root/test_netem.py"
p3_b="tests/job/test_registered.py tests/job/test_resnet50.py tests/unit/test_mnist.py tests/job/test_arch.py
      tests/job/test_breakdown.py tests/job/test_gpt.py"

# shellcheck disable=SC2046,SC2086  # the file lists split on whitespace by design
echo "tools/test.sh: phase 1: the root tier's measuring files and the launcher's tests on Paddle 2.6.2; Paddle 3.x installed beside"
# (make's command-line variables, VENV3=... say, reach this make in MAKEFLAGS)
make --no-print-directory install-paddle3 >log/install-paddle3.log 2>&1 &
installer=$!
session root-measure "$py2" -m "root and not gpu_sim" $root_measure
session jobs-b "$py2" -m "not root and not gpu_sim" $jobs_b
wait "$installer"
rc_install=$?
installer=
echo "tools/test.sh: make install-paddle3 ended after $SECONDS s, exit $rc_install"
wait_session root-measure
if [ "$rc_install" -ne 0 ]; then
    echo "tools/test.sh: make install-paddle3 failed; its output:"
    cat log/install-paddle3.log
    finish
    echo "tools/test.sh: temporary directories kept in $tmp"
    exit 1
fi
echo "tools/test.sh: phase 2: Paddle 2.6.2 unit and job tiers, the rest of the root tier, the simulated GPU host, documented commands; Paddle $("$py3" -c 'import paddle; print(paddle.__version__)' 2>/dev/null) in two sessions"
session unit-jobs-a "$py2" -m "not root and not gpu_sim" $(ignore $jobs_b $jobs_c $docs) tests/unit tests/job
session jobs-c "$py2" -m "not root and not gpu_sim" $jobs_c
session root-a "$py2" -m "root and not gpu_sim" $root_a
session root-b "$py2" -m "root and not gpu_sim" $(ignore $root_a $root_measure) tests
session gpu-sim "$py2" -m gpu_sim tests/gpu_sim
session docs "$py2" -m "not root and not gpu_sim" $docs
session paddle3-a "$py3" "$@" $(ignore $p3_b)
session paddle3-b "$py3" -m "$p3_marks" $p3_b
finish
trap - INT TERM
if [ ${#failed[@]} -eq 0 ]; then
    echo "tools/test.sh: every session passed"
    rm -rf "$tmp"
    exit 0
fi
echo "tools/test.sh: failed: ${failed[*]}; temporary directories kept in $tmp"
exit 1
