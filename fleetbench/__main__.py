import sys

from fleetbench.cli import main

sys.exit(main())
