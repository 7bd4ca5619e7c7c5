"""The simulated GPU host's hook (tests/gpu_sim/simhost.py): on PYTHONPATH, it installs the Paddle
facade in every Python process that SIMULATED_GPU_HOST puts on a simulated host, and does nothing
in any other (one environment lookup)."""
import os

if os.environ.get("SIMULATED_GPU_HOST"):
    import importlib.util
    import sys

    _spec = importlib.util.spec_from_file_location(
        "fleetbench_gpu_sim_facade", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "facade.py"))
    _facade = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _facade
    _spec.loader.exec_module(_facade)
    _facade.install()
