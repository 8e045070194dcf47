"""A torch.compile backend of our own, as a team would register theirs: Inductor with one option
changed (FP contraction across statements, `-ffp-contract=fast`). Imported by the worker through
FUSEBENCH_TORCH_BACKEND_MODULES; test_torch_backends.py runs a filtered profile through it and
checks from the evidence that the changed option reached the compiler."""

import torch
import torch._inductor.config
from torch._dynamo import register_backend
from torch._inductor.compile_fx import compile_fx

NAME = "fusebench_test_inductor_fma"


@register_backend(name=NAME)
def inductor_with_fp_contraction(graph_module, example_inputs):
    with torch._inductor.config.patch({"cpp.enable_floating_point_contract_flag": "fast"}):
        return compile_fx(graph_module, example_inputs)
