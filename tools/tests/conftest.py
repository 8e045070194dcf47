"""The tests' runs of tools/run are not runs of this machine: they keep no machine-wide record of the copy's
speed that a user's later run would be set against, and they are not set against this machine class's
reference runs, which would make their verdicts depend on where the tests run (reports/yardsticks.py). A
test that exercises either sets it itself. Subprocesses inherit the environment."""

import os

from reports import yardsticks

os.environ[yardsticks.MACHINE_HISTORY_ENV] = "none"
os.environ[yardsticks.REFERENCE_ENV] = "none"
