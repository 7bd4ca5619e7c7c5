#!/usr/bin/env bash
# `make test`: the whole suite on Paddle 2.6.2, and the collective and core tests on 3.x.
#   usage: tools/test.sh PYTHON_2.6.2 PYTHON_3.x MARKERS_FOR_3.x
#
# Sessions of pytest side by side, at most five at once, because one after the other the suite takes
# over 30 minutes on 2 cores while most tests wait: on a Paddle launcher, a shaped link, an sshd or a
# slurmd. Every job picks free ports and its own temporary directory, and every emulated cluster
# its own name and subnet (tests/util.cluster_name, netem's subnet lock), so sessions share nothing.
#
# CPU, not waiting, is the budget: each session's summary ends with the CPU it used and the JUnit
# XML in log/ holds each test's (tests/conftest.py); tools/test_times.py sums them by file. What the
# layouts measured (fresh clones, this 2-vCPU machine, nothing else running):
#   - one session after another: 32:04, 43.5 CPU minutes (before the CPU cuts of 2026-11-29);
#   - 3 sessions then 2 (the root tier and 3.x beside each other in pass 2): 25:24, 25:25, 26:43,
#     34.7-35.1 CPU minutes; pass 1 used ~1.5 cores, but pass 2 ~1.0: the root tier's 10 minutes
#     are mostly waiting (217 CPU s in 608 s) and 3.x alone could not fill the second core;
#   - 4 then 5 sessions (2.6.2 split by measured wall): 24:10 and 37.0 CPU minutes; 2 then 8: over
#     22 minutes, load 12, two commands timing out. More CPU-bound sessions cost CPU (contention)
#     and stretch every wait.
#   - the root tier's waiting files in pass 1, its CPU-heavy files beside 3.x (in two) in pass 2
#     (this layout; fresh clone of 5935deb, 2026-11-29): 22:33 with the install; pass 1 15:44 (the
#     rest session 944 s, the four sessions using 1.4 cores), pass 2 5:24; 30.6 CPU minutes;
#   - the same with pass 1 in five sessions (0220c09): pass 1 14:35, and the simulated GPU host's
#     demo sweep stalled (its ResNet50 rank logged no step within the demo's 60 s, load ~6).
# Hence the sessions below; since 2026-11-29 (session 10) they are not two passes but a queue of
# at most five at once, the next starting when one ends: /proc/stat sampled through a fresh clone's
# run (20:09 without the install) showed pass 1 at 2.00 busy cores throughout and pass 2 at ~1.7,
# 120 s of both cores idle in all, most of it pass 2's tail and the barrier between the passes,
# where the root tier's waiting session (70 CPU s in 692 s) had ended three minutes before the
# slowest. Queued, a 3.x session takes the place of each pass-1 session that ends: the same
# measurement of a fresh clone of 78c5f9f, 19:31 without the install (49 s) and 54 s idle; the
# machine busy 2,284 CPU s, so what is left is CPU (process accounting of that run: 738 processes
# import Paddle, ~1.1 CPU s each for the import alone, ~45% of the run).
# Then (2026-11-30) what ran twice or for nothing: the 2-rank runs' files in one session per build,
# orchestration tests on ResNet18, report captions wrapped without re-measuring: the tests' own CPU
# 1,779 -> 1,689 s; three quiet fresh clones of 9db4b57 19:15, 18:40, 18:42 with the install (49 s).
#   2.6.2: the slow job files (launcher, parameter server, docs, GPT); the simulated GPU host's
#       tier with the per-method breakdown and the Kubernetes operator jobs; the root tier's waiting
#       files (Slurm, SSH, shaped links: their waits fill the other sessions' idle core); the rest's
#       job files (the architectures among them, beside the 2-rank runs they share); everything
#       else (its output on the terminal).
#   then, as places free: 3.x's slowest job files, its unit and job tiers, and the root tier's
#       CPU-heavy files (diagnose's timed probes, the CPU-quota probes, Kubernetes' pods).
# Each other session's output is kept in a file and shown once it and the terminal's session have
# ended, so two progress lines never interleave. Every session leaves a JUnit XML file in log/.
set -u
py2=$1 py3=$2 marks3=$3
mkdir -p log
# short: a job's TMPDIR under a test's directory holds Python's AF_UNIX sockets (multiprocessing's
# Manager in Paddle's gloo start-up), whose path may not pass 107 bytes
tmp=$(mktemp -d /tmp/fbt.XXXXXX)
# the simulated GPU host's 3.x builds and the root tier's Kubernetes "3.x image" run on this
# interpreter, as given, not resolved (a virtualenv's python is a symlink whose target has no Paddle)
export FLEETBENCH_TEST_PADDLE3=$py3
MAX_SESSIONS=5
declare -A running=()  # pid -> session name
# A background job of a non-interactive shell ignores SIGINT, so Ctrl-C must be passed on by hand:
# a TERM stops every session at once (each pytest unwinds on it, tests/conftest.py).
trap 'kill -TERM "${!running[@]}" 2>/dev/null; wait; exit 130' INT TERM

# pytest_as NAME PYTHON PYTEST_ARGS...: one session, its JUnit XML log/NAME.xml, its tmp dirs its own;
# -p no:cacheprovider: two sessions would both rewrite .pytest_cache at their end. Run in a
# background subshell, which it replaces (exec): the TERM of the trap reaches pytest itself, not a
# subshell that would die and leave its pytest running.
pytest_as() {
    local name=$1 py=$2
    shift 2
    exec "$py" -m pytest -q --durations=20 -p no:cacheprovider --junitxml "log/$name.xml" --basetemp "$tmp/$name" "$@"
}
ignoring() {  # --ignore=F for every F
    local f
    for f in "$@"; do printf -- '--ignore=%s\n' "$f"; done
}

slow_jobs=(tests/job/test_launch.py tests/job/test_ps.py tests/job/test_docs.py tests/job/test_gpt.py)
beside_sim=(tests/job/test_breakdown.py tests/job/test_k8s_operator.py)
# util.two_rank_run makes a benchmark's 2-rank run once per session and test_registered shares it
# with test_resnet50 (ResNet50), test_arch (CTR) and test_mnist (MNIST): on each build the four are
# in one session, or the run is made twice (a ResNet50 2-rank run is ~25 CPU s).
two_rank=(tests/job/test_registered.py tests/job/test_resnet50.py tests/job/test_arch.py tests/unit/test_mnist.py)
# the 2.6.2 job files of the rest: a session of their own beside the unit tier
rest_jobs=("${two_rank[@]}" tests/job/test_grad_sizes.py tests/job/test_blame.py tests/job/test_nhwc.py
           tests/job/test_methods.py tests/job/test_diagnose_probe.py tests/job/test_supervisor.py tests/job/test_run.py
           tests/job/test_hang_report.py)
root_cpu=(tests/root/test_diagnose.py tests/root/test_diagnose_noise_nodes.py tests/root/test_probe_quota.py tests/root/test_k8s_collective.py)
slow3=(tests/job/test_launch.py tests/job/test_gpt.py "${two_rank[@]}")

# one function a session, named s_NAME; the queue is their names, in starting order
s_rest() { pytest_as rest "$py2" -m "not root and not gpu_sim" tests $(ignoring "${slow_jobs[@]}" "${beside_sim[@]}" "${rest_jobs[@]}"); }
s_slow-jobs() { pytest_as slow-jobs "$py2" -m "not root and not gpu_sim" "${slow_jobs[@]}"; }
s_gpu-sim() { pytest_as gpu-sim "$py2" -m "gpu_sim or not root" tests/gpu_sim "${beside_sim[@]}"; }
s_root-waiting() { pytest_as root-waiting "$py2" -m "root and not gpu_sim" tests $(ignoring "${root_cpu[@]}"); }
s_rest-jobs() { pytest_as rest-jobs "$py2" -m "not root and not gpu_sim" "${rest_jobs[@]}"; }
s_paddle3() { pytest_as paddle3 "$py3" -m "$marks3" tests/unit tests/job $(ignoring "${slow3[@]}"); }
s_paddle3-slow() { pytest_as paddle3-slow "$py3" -m "$marks3" "${slow3[@]}"; }
s_root-cpu() { pytest_as root-cpu "$py2" -m "root and not gpu_sim" "${root_cpu[@]}"; }
# the longer of the two 3.x sessions first (paddle3-slow, since it holds the 2-rank runs' files:
# ~370 s against ~340 quiet), so the last to start is not the last to end
queue=(rest slow-jobs gpu-sim root-waiting rest-jobs paddle3-slow paddle3 root-cpu)
TERMINAL=rest  # the session whose progress is on the terminal

# Every process of the run imports the repository's modules, and with PYTHONDONTWRITEBYTECODE set
# (as on this machine and its CI) none writes their bytecode, so each compiled them from source:
# 0.05-0.08 s of CPU a process (`fleetbench launch --help` 0.14 -> 0.10 s, a ResNet50 rank's
# imports 1.21 -> 1.16 s, `fleetbench sweep --help` 0.20 -> 0.12 s, each alone; 2026-11-29), over
# the thousands of processes a run starts. Compiled once here, they are read by every process.
"$py2" -m compileall -q -j 2 fleetbench datasets collective parameter_server tests tools bench >/dev/null

start() {  # start the session at the head of the queue
    local name=${queue[0]}
    queue=("${queue[@]:1}")
    if [ "$name" = "$TERMINAL" ]; then
        "s_$name" &
    else
        "s_$name" >"log/$name.log" 2>&1 &
    fi
    running[$!]=$name
}
rcs=() ended=() terminal_done=
show() {  # the logs of the sessions that ended, once the terminal's session is done with it
    local name
    [ -n "$terminal_done" ] || return 0
    for name in "${ended[@]}"; do
        echo "---------------- $name (log/$name.log)"
        cat "log/$name.log"
    done
    ended=()
}
version() {  # the Paddle a python has, from its metadata (importing Paddle costs a second of CPU)
    "$1" -c 'import importlib.metadata as m; print(m.version("paddlepaddle"))' 2>/dev/null || echo "?"
}
echo "tools/test.sh: ${#queue[@]} sessions, at most $MAX_SESSIONS at once, Paddle $(version "$py2") and $(version "$py3"):" \
     "${queue[*]}; the others' output follows $TERMINAL's"
while [ ${#queue[@]} -gt 0 ] || [ ${#running[@]} -gt 0 ]; do
    while [ ${#queue[@]} -gt 0 ] && [ ${#running[@]} -lt $MAX_SESSIONS ]; do
        start
    done
    wait -n -p done_pid "${!running[@]}"
    rc=$?
    name=${running[$done_pid]}
    unset "running[$done_pid]"
    rcs+=("$name exit $rc")
    if [ "$name" = "$TERMINAL" ]; then
        terminal_done=1
        [ ${#running[@]} -eq 0 ] || echo "tools/test.sh: still running: $(printf '%s ' "${running[@]}")"
    else
        ended+=("$name")
    fi
    show
done
trap - INT TERM

echo "tools/test.sh: ${rcs[*]}"
if ! printf '%s\n' "${rcs[@]}" | grep -qv ' exit 0$'; then
    rm -rf "$tmp"
    exit 0
fi
echo "tools/test.sh: temporary directories kept in $tmp"
exit 1
