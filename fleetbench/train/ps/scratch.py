"""A private scratch directory per parameter-server process, removed however the process ends.

Paddle 2.6.2 writes files where it runs: `<id>_train_desc.prototxt` (and `fleet_desc.prototxt`)
into the current directory on every train_from_dataset, `http.log` when gloo's HTTP rendezvous
module is imported; the driver adds its pipe counters and table dumps. All of them go here.

A killed process runs no `finally`, so the directory is not left to it: a reaper (a shell that
waits for end-of-file on a pipe only this process holds the write end of) removes the directory
when the process is gone, by exit, exception, SIGTERM or SIGKILL. The reaper runs in a session
of its own and without the job's environment, so killing the job's process group or its tagged
processes (`fleetbench launch`) leaves it to do its work; it exits right after.
"""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

PREFIX = "fleetbench-ps-"
# $0 is the directory (an argument, never parsed by the shell); `cat` returns at end-of-file,
# i.e. when every write end is closed, which the kernel does when the owner process dies.
REAPER = 'cat >/dev/null; rm -rf -- "$0"'


class Scratch:
    def __init__(self, path: Path | None = None) -> None:
        """A fresh directory, or `path` (made if missing) where another process must find it."""
        if path is not None:
            path.mkdir(exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX)) if path is None else path
        self._reaper = subprocess.Popen(
            ["/bin/sh", "-c", REAPER, str(self.path)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, env={"PATH": os.defpath}, close_fds=True)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def subdir(self, name: str) -> Path:
        """A fresh directory inside the scratch directory."""
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.path))

    def close(self) -> None:
        """Remove the directory now and let the reaper go."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._reaper.stdin.close()
        self._reaper.wait()


_process_scratch = None


def for_process() -> Scratch:
    """This process's scratch directory, made on first use."""
    global _process_scratch
    if _process_scratch is None:
        _process_scratch = Scratch()
    return _process_scratch
