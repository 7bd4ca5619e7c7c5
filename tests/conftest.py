import sys
from pathlib import Path

# Tests import helpers from tests/util.py and the repo's packages without installing them.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
