#!/usr/bin/env bash
# `make test`: the whole suite on Paddle 2.6.2, and the collective and core tests on 3.x.
#   usage: tools/test.sh PYTHON_2.6.2 PYTHON_3.x -m MARKS PATHS...   (the last: the 3.x selection)
#
# Two passes of pytest sessions side by side. Most tests wait on a Paddle launcher, a shaped link or
# an sshd start-up, so one session uses about one core; and the suite's CPU (about 33 CPU minutes)
# needs 17 minutes of two cores packed perfectly. The budget is 20, so the sessions are cut to keep
# both cores busy to the end of each pass, each pass's sessions of about equal length:
#   (1) 2.6.2: the unit and job tiers in three sessions (files named below, the rest in a catch-all)
#       and the root tier's cluster files (Slurm, SSH, emulated links: mostly waiting on daemons);
#       the 3.x virtualenv is installed beside them (make install-paddle3; nothing in pass 1 needs it).
#   (2) the rest of the root tier (the probe under a quota, diagnose, shaped-link breakdowns,
#       Kubernetes), the simulated GPU host, the documented commands, and the 3.x tests in two.
# Every job picks free ports, its own temporary directory and (emulated clusters) its own subnet
# under a machine-wide lock, so sessions share nothing. Files that share a session's cached run
# (util.two_rank_run: registered, resnet50, mnist, arch) stay in one session.
# Where the files went and why: tools/test_times.py on the JUnit XML each session leaves in log/
# (each test's wall and CPU seconds, tests/conftest.py). Fresh clones of 2026-11-29 with the layout
# before (three sessions, then two): 25:24 and 25:25, 34.9 and 34.7 CPU minutes.
# A session's output is kept in log/NAME.log and shown once its pass ends, so progress lines never
# interleave; a line says when each session ends.
set -u
py2=$1 py3=$2
shift 2
p3_marks=$2  # "$@" is -m MARKS PATHS... (the Makefile's PADDLE3_SELECT)
mkdir -p log
# short: a job's TMPDIR under a test's directory holds Python's AF_UNIX sockets (multiprocessing's
# Manager in Paddle's gloo start-up), whose path may not pass 107 bytes
tmp=$(mktemp -d /tmp/fbt.XXXXXX)
pids=() names=() failed=()
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
}

# finish: wait for the pass's sessions (a line as each ends), then show each one's output
finish() {
    local start=$SECONDS running=("${pids[@]}") done_pid rc i
    while [ ${#running[@]} -gt 0 ]; do
        wait -n -p done_pid "${running[@]}"
        rc=$?
        [ -n "${done_pid:-}" ] || break  # nothing left to wait for (not expected)
        for i in "${!pids[@]}"; do
            if [ "${pids[$i]}" = "$done_pid" ]; then
                echo "tools/test.sh: ${names[$i]} ended after $((SECONDS - start)) s, exit $rc"
                [ "$rc" -eq 0 ] || failed+=("${names[$i]}")
            fi
        done
        running=($(printf '%s\n' "${running[@]}" | grep -vx "$done_pid"))
    done
    for i in "${!names[@]}"; do
        echo "---------------- ${names[$i]} (log/${names[$i]}.log)"
        cat "log/${names[$i]}.log"
    done
    pids=() names=()
}

# ignore FILE...: --ignore=FILE for each (the catch-all sessions skip the files other sessions run)
ignore() {
    local f
    for f in "$@"; do echo "--ignore=$f"; done
}

# Pass 1 (2.6.2). Sessions B and C are the long job files, balanced by their measured wall time;
# A is every other unit and job file, so a new file runs somewhere without being listed.
jobs_b="tests/job/test_launch.py tests/job/test_grad_sizes.py tests/job/test_blame.py tests/unit/test_explain.py
        tests/unit/test_plot.py tests/unit/test_k8s.py"
jobs_c="tests/job/test_registered.py tests/job/test_resnet50.py tests/unit/test_mnist.py tests/job/test_arch.py
        tests/job/test_ps.py tests/job/test_diagnose_probe.py tests/job/test_k8s_operator.py"
docs="tests/job/test_docs.py"  # pass 2: it runs documented 3.x commands, and .venv3 is made in pass 1
root_a="tests/root/test_slurm.py tests/root/test_ssh_cluster.py tests/root/test_netem_cluster.py
        tests/root/test_launch_promises.py tests/root/test_netem.py"
echo "tools/test.sh: pass 1: Paddle 2.6.2 unit and job tiers in three sessions, the root tier's clusters; Paddle 3.x installed beside"
${MAKE:-make} --no-print-directory install-paddle3 >log/install-paddle3.log 2>&1 &
installer=$!
# shellcheck disable=SC2046,SC2086  # the file lists split on whitespace by design
session unit-jobs-a "$py2" -m "not root and not gpu_sim" $(ignore $jobs_b $jobs_c $docs) tests/unit tests/job
session jobs-b "$py2" -m "not root and not gpu_sim" $jobs_b
session jobs-c "$py2" -m "not root and not gpu_sim" $jobs_c
session root-a "$py2" -m "root and not gpu_sim" $root_a
wait "$installer"
rc_install=$?
installer=
finish
if [ "$rc_install" -ne 0 ]; then
    echo "tools/test.sh: make install-paddle3 failed (exit $rc_install); its output:"
    cat log/install-paddle3.log
    echo "tools/test.sh: temporary directories kept in $tmp"
    exit 1
fi

# Pass 2: the root tier's other files (its catch-all), the simulated GPU host (its 3.x builds on
# the 3.x interpreter, FLEETBENCH_TEST_PADDLE3; its root tests, sshd and Slurm nodes, too), the
# documented commands, and the 3.x selection in two (p3-b: the files sharing the session's runs).
p3_b="tests/job/test_registered.py tests/job/test_resnet50.py tests/unit/test_mnist.py tests/job/test_arch.py
      tests/job/test_breakdown.py tests/job/test_gpt.py"
echo "tools/test.sh: pass 2: the rest of the root tier, the simulated GPU host, documented commands; Paddle $("$py3" -c 'import paddle; print(paddle.__version__)' 2>/dev/null) in two sessions"
session root-b "$py2" -m "root and not gpu_sim" $(ignore $root_a) tests
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
