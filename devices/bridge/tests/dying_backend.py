"""A torch.compile backend for test_worker_restart.py: Inductor, except that while the file named by
$FUSEBENCH_TEST_DEATHS holds a count above 0, a compile counts it down and kills its own process
with SIGKILL (the worker server dying mid-case, as an OOM kill or a crash in a framework would).
Imported by the worker through FUSEBENCH_TORCH_BACKEND_MODULES."""

import os
import signal
import sys

from torch._dynamo import register_backend
from torch._inductor.compile_fx import compile_fx

NAME = "fusebench_test_dying"


@register_backend(name=NAME)
def inductor_or_death(graph_module, example_inputs):
    path = os.environ.get("FUSEBENCH_TEST_DEATHS", "")
    if path and os.path.exists(path):
        with open(path) as f:
            left = int(f.read().strip() or 0)
        if left > 0:
            with open(path, "w") as f:
                f.write(f"{left - 1}\n")
            print(f"fusebench_test_dying: SIGKILL to the worker server, pid {os.getpid()}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    return compile_fx(graph_module, example_inputs)
