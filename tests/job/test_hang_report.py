"""What a test reports of a hung job: every process's stack (tests/util.process_stacks), since a
parameter-server job hung in its start-up leaves its rank logs empty."""
import subprocess

from util import PYTHON, process_stacks

# blocked in a named function until its stdin closes: a hang whose place is known
BLOCKED = "import sys\ndef waiting_for_the_rendezvous():\n    sys.stdin.read()\nwaiting_for_the_rendezvous()\n"


def test_the_stack_of_a_blocked_process_names_the_function_it_waits_in():
    proc = subprocess.Popen([PYTHON, "-c", BLOCKED], stdin=subprocess.PIPE)
    try:
        # py-spy reads the process from outside; retried until the interpreter has reached the call
        for _ in range(50):
            report = process_stacks([proc.pid])
            if "waiting_for_the_rendezvous" in report:
                break
        assert f"==== stack of {proc.pid}: Process {proc.pid}: {PYTHON} -c" in report
        assert "waiting_for_the_rendezvous" in report, report
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_process_already_gone_is_said_not_read():
    gone = subprocess.Popen([PYTHON, "-c", "pass"])
    gone.wait()
    report = process_stacks([gone.pid])
    assert f"==== stack of {gone.pid}: not read" in report
