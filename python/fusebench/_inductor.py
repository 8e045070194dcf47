"""Inductor compiled with switches, and Triton's FMA contraction turned off.

SwitchedInductor is a torch.compile backend: Inductor's compile_fx with switches applied (config
patches, graph breaks at named nodes, decompositions or lowerings left out for named ops; the
switches are fusebench._explain's Switch objects, read by their kind, name and value). judge
compiles with it when given Inductor options, explain searches with it.

triton_without_fp_fusion is the one copy of the patch of Triton's CUDA backend that
tools/gpu/inductor_mechanisms.py also applies (it loads this file by its path: the tool runs where
the package is not installed, so this module imports nothing of fusebench's).
"""

from __future__ import annotations

import contextlib
import os


def _op_by_name(name: str):
    import torch

    namespace, _, rest = name.partition(".")
    packet_name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace), packet_name)
    return getattr(packet, overload or "default")


class SwitchedInductor:
    """A torch.compile backend: Inductor's compile_fx with switches applied (config patches,
    graph breaks at named nodes, decompositions or lowerings left out for named ops)."""

    def __init__(self, switches: list = (), config: dict | None = None):
        self.switches = list(switches)
        self.config = dict(config or {})
        for s in self.switches:
            if s.kind == "compiler":
                self.config[s.name] = s.value
        self.cuts = [(s.name, s.value) for s in self.switches if s.kind == "split"]
        self.decompositions_off = [s.value for s in self.switches if s.kind == "decomposition"]
        self.lowerings_off = [s.value for s in self.switches if s.kind == "lowering"]
        self.no_fp_fusion = any(s.kind == "triton" for s in self.switches)
        if self.no_fp_fusion:
            self.config["compile_threads"] = 1  # Triton compiles in this process, under the patch
        self.graphs = 0

    def __repr__(self) -> str:
        return f"SwitchedInductor({[s.token for s in self.switches]}, config={self.config})"

    @contextlib.contextmanager
    def _patched(self):
        import torch._functorch.config as functorch_config
        import torch._inductor.config as inductor_config
        import torch._inductor.graph as inductor_graph

        patch = dict(self.config)
        if self.lowerings_off or self.decompositions_off:
            patch["force_disable_caches"] = True  # the cache keys do not see these
        off = {_op_by_name(n) for n in self.lowerings_off}
        original = inductor_graph.fallback_node_due_to_unsupported_type

        def fallback(n, *args, **kwargs):
            return n.target in off or original(n, *args, **kwargs)

        triton = triton_without_fp_fusion() if self.no_fp_fusion else contextlib.nullcontext()
        # An op whose decomposition is left out reaches Inductor's implicit fallback, which raises
        # "a decomposition exists, we should switch to it" wherever the environment sets CI (a check
        # meant for PyTorch's own CI, tripped by any CI runner's CI=true): hidden while compiling.
        ci = os.environ.pop("CI", None) if self.decompositions_off else None
        # AOTAutograd compiles a backward graph at its first backward call, after this context has
        # closed, so the switches would never reach it: compiled with the forward instead.
        backward_now = functorch_config.patch(force_non_lazy_backward_lowering=True)
        with inductor_config.patch(patch), backward_now, triton:
            if off:
                inductor_graph.fallback_node_due_to_unsupported_type = fallback
            try:
                yield
            finally:
                inductor_graph.fallback_node_due_to_unsupported_type = original
                if ci is not None:
                    os.environ["CI"] = ci

    def _first_call_patched(self, compiled):
        """Triton may compile a kernel at its first launch: that call runs under the patches too."""
        if not self.no_fp_fusion:
            return compiled
        state = {"first": True}

        def run(*args):
            if state["first"]:
                state["first"] = False
                with self._patched():
                    return compiled(*args)
            return compiled(*args)

        return run

    def compile_graph(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        kwargs = {}
        if self.decompositions_off:
            from torch._inductor.decomposition import select_decomp_table

            table = dict(select_decomp_table())
            for n in self.decompositions_off:
                table.pop(_op_by_name(n), None)
            kwargs["decompositions"] = table
        with self._patched():
            return self._first_call_patched(compile_fx(gm, example_inputs, **kwargs))

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        names = {n.name for n in gm.graph.nodes}
        cuts = [(where, node) for where, node in self.cuts if node in names]
        if not cuts:
            return self.compile_graph(gm, example_inputs)
        return split_and_compile(gm, cuts, self.compile_graph)


def split_and_compile(gm, cuts, compile_graph):
    """gm split at the cuts (("before"|"after", node name)), each part compiled on its first call."""
    import torch
    from torch.fx.passes.split_module import split_module

    nodes = [n for n in gm.graph.nodes]
    order = {n.name: i for i, n in enumerate(nodes)}
    starts = sorted({order[name] + (1 if where == "after" else 0) for where, name in cuts})

    def part(n):
        return sum(1 for s in starts if order[n.name] >= s)

    split = split_module(gm, None, part, keep_original_order=True)

    class Lazy(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module
            self.compiled = None

        def forward(self, *args):
            if self.compiled is None:
                self.compiled = compile_graph(self.module, list(args))
            return self.compiled(*args)

    for name, child in list(split.named_children()):
        if name.startswith("submod_"):
            setattr(split, name, Lazy(child))
    return split


# ---- Triton
def triton_fp_fusion_patchable() -> tuple[bool, str]:
    """(whether triton_without_fp_fusion can apply here, why not)."""
    try:
        from triton.backends.nvidia.compiler import CUDABackend

        if not hasattr(CUDABackend, "parse_options"):
            return False, "triton.backends.nvidia.compiler.CUDABackend has no parse_options"
        return True, ""
    except Exception as exc:
        return False, f"cannot import Triton's CUDA backend: {exc!r}"


@contextlib.contextmanager
def triton_without_fp_fusion():
    """Every Triton CUDA compile inside compiles with enable_fp_fusion=False. Inductor passes its own
    value (not emulate_precision_casts) explicitly, which the TRITON_DEFAULT_FP_FUSION environment
    variable does not override: the backend's option parser is patched instead."""
    from triton.backends.nvidia.compiler import CUDABackend

    original = CUDABackend.parse_options

    def parse_options(self, opts, *args, **kwargs):
        opts = dict(opts)
        opts["enable_fp_fusion"] = False
        return original(self, opts, *args, **kwargs)

    CUDABackend.parse_options = parse_options
    try:
        yield
    finally:
        CUDABackend.parse_options = original
