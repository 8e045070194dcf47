"""The tests' runs of tools/run are not runs of this machine that a user's later run should be set against:
they keep no machine-wide record of the copy's speed (reports/yardsticks.py). Subprocesses inherit it."""

import os

from reports import yardsticks

os.environ[yardsticks.MACHINE_HISTORY_ENV] = "none"
