"""Runs `python -m fleetbench.job.rankwrap` for Paddle's launchers, which take a .py file.

Paddle 2.6.2's launcher runs a training script ending in .py as `python -u FILE ARGS` (the legacy
one always does), so `-m MODULE` cannot be passed to it. This file sits alone in its directory:
Python puts that directory first on sys.path, and there is nothing in it to shadow a module.
"""
import runpy

runpy.run_module("fleetbench.job.rankwrap", run_name="__main__", alter_sys=True)
