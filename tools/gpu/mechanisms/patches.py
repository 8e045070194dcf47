"""In-process patches a variant applies, by name. Triton's FMA contraction off is fusebench's own
patch (python/fusebench/_inductor.py, the one copy, which fusebench.explain applies too), loaded
from the checkout by its path: this tool runs where the fusebench package is not installed, and that
module imports nothing of the package's."""

from __future__ import annotations

import importlib.util
import os


def _fusebench_inductor():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    spec = importlib.util.spec_from_file_location(
        "fusebench_inductor", os.path.join(root, "python", "fusebench", "_inductor.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_inductor = _fusebench_inductor()
# (whether the patch can apply here, why not)
triton_parse_options_available = _inductor.triton_fp_fusion_patchable
PATCHES = {"triton_parse_options": _inductor.triton_without_fp_fusion}
