// The torch devices: PyTorch through the Python bridge (devices/bridge).
//   torch       CPU. eager: the graph op by op with PyTorch's own ops; fused: torch.compile of the
//               whole graph (fullgraph=True, dynamic=False; Inductor's C++/OpenMP back end).
//   torch:cuda  the same on a CUDA GPU (Inductor -> Triton).
// Scalars are Python scalars, as a user writes `x * 0.7`; the broadcast lowering materialises the
// scalar inside the graph (`x * torch.full_like(x, 0.7)`).
// Knob mapping (devices/README.md has the table): emulate_per_op_rounding ->
// torch._inductor.config.emulate_precision_casts; fma_contraction ->
// cpp.enable_floating_point_contract_flag = "fast" (GCC contracts across Inductor's separate
// statements only with "fast"); threads -> torch.set_num_threads and cpp.threads.
#include <fmt/format.h>

#include <fmt/ranges.h>
#include <cmath>
#include <set>

#include "framework_devices.hpp"

namespace fusebench::framework {

namespace {
using engine::OpKind;

std::string torch_dtype(DType d) {
  switch (d) {
    case DType::f16:
      return "torch.float16";
    case DType::bf16:
      return "torch.bfloat16";
    case DType::f32:
      return "torch.float32";
    case DType::f64:
      return "torch.float64";
    case DType::i8:
      return "torch.int8";
    case DType::i16:
      return "torch.int16";
    case DType::i32:
      return "torch.int32";
    case DType::i64:
      return "torch.int64";
    case DType::u8:
      return "torch.uint8";
    case DType::boolean:
      return "torch.bool";
    default:
      return fmt::format("torch.{}", dtype_name(d));
  }
}

// A Python float literal (inf and NaN have none).
std::string python_float(double v) {
  if (std::isnan(v)) return "float('nan')";
  if (std::isinf(v)) return v > 0 ? "float('inf')" : "float('-inf')";
  return fmt::format("{}", v);
}

std::string torch_op(const engine::Node& n, const std::vector<std::string>& a,
                     const engine::EngineOptions& o) {
  const bool broadcast = o.scalar_lowering == engine::ScalarLowering::BroadcastTensor;
  switch (n.kind) {
    case OpKind::Add:
      return fmt::format("torch.add({}, {})", a[0], a[1]);
    case OpKind::Sub:
      return fmt::format("torch.sub({}, {})", a[0], a[1]);
    case OpKind::Mul:
      return fmt::format("torch.mul({}, {})", a[0], a[1]);
    case OpKind::Div:
      return fmt::format("torch.div({}, {})", a[0], a[1]);
    case OpKind::AddScalar:
      return broadcast ? fmt::format("{0} + torch.full_like({0}, {1})", a[0], n.scalar)
                       : fmt::format("{} + {}", a[0], n.scalar);
    case OpKind::MulScalar:
      return broadcast ? fmt::format("{0} * torch.full_like({0}, {1})", a[0], n.scalar)
                       : fmt::format("{} * {}", a[0], n.scalar);
    case OpKind::Neg:
      return fmt::format("torch.neg({})", a[0]);
    case OpKind::Exp:
      return fmt::format("torch.exp({})", a[0]);
    case OpKind::Sqrt:
      return fmt::format("torch.sqrt({})", a[0]);
    case OpKind::Rsqrt:
      return fmt::format("torch.rsqrt({})", a[0]);
    case OpKind::GeluErf:
      return fmt::format("F.gelu({})", a[0]);
    case OpKind::GeluTanh:
      return fmt::format("F.gelu({}, approximate='tanh')", a[0]);
    case OpKind::Cast:
      return fmt::format("{}.to({})", a[0], torch_dtype(n.dtype));
    case OpKind::Sum:
      return fmt::format("torch.sum({}, dim={}, keepdim={})", a[0], n.axis,
                         n.keepdim ? "True" : "False");
    case OpKind::Mean:
      return fmt::format("torch.mean({}, dim={}, keepdim={})", a[0], n.axis,
                         n.keepdim ? "True" : "False");
    case OpKind::Max:
      return fmt::format("torch.amax({}, dim={}, keepdim={})", a[0], n.axis,
                         n.keepdim ? "True" : "False");
    case OpKind::LayerNorm:
      return fmt::format("F.layer_norm({}, ({},), {}, {}, eps={})", a[0], n.shape.back(), a[1],
                         a[2], n.eps);
    case OpKind::Softmax:
      return fmt::format("torch.softmax({}, dim=-1)", a[0]);
    case OpKind::Matmul:
      return fmt::format("torch.matmul({}, {})", a[0], a[1]);
    case OpKind::Permute:
      return fmt::format("{}.permute({})", a[0], fmt::join(n.permutation, ", "));
    case OpKind::Reshape:
      return fmt::format("{}.reshape({})", a[0], fmt::join(n.shape, ", "));
    case OpKind::Slice:
      return fmt::format("{}.narrow({}, {}, {})", a[0], n.axis, n.start,
                         n.shape[std::size_t(n.axis)]);
    case OpKind::Concat:
      return fmt::format("torch.cat([{}], dim={})", fmt::join(a, ", "), n.axis);
    case OpKind::Expand:
      return fmt::format("{}.expand({})", a[0], fmt::join(n.shape, ", "));
    // Task E's ops: PyTorch's own log and gelu backward; the mask as masked_fill of the upper triangle.
    case OpKind::Log:
      return fmt::format("torch.log({})", a[0]);
    case OpKind::GeluTanhBackward:
      return fmt::format("torch.ops.aten.gelu_backward({}, {}, approximate='tanh')", a[0], a[1]);
    case OpKind::CausalMask: {
      const auto rows = n.shape[n.shape.size() - 2], cols = n.shape.back();
      return fmt::format(
          "{0}.masked_fill(torch.ones({1}, {2}, dtype=torch.bool, device={0}.device).triu(1), {3})",
          a[0], rows, cols, python_float(n.scalar));
    }
    // Embedding rows, and their backward as index_add_ into zeros accumulated in fp32 (fp64 for
    // f64) and rounded once, as the engine's ops define it.
    case OpKind::GatherRows:
      return fmt::format("F.embedding({}.long(), {})", a[1], a[0]);
    case OpKind::ScatterAddRows: {
      const std::string acc = n.dtype == DType::f64 ? "torch.float64" : "torch.float32";
      return fmt::format(
          "torch.zeros(({}, {}), dtype={}, device={}.device).index_add_(0, {}.long(), "
          "{}.to({})).to({})",
          n.shape[0], n.shape[1], acc, a[0], a[1], a[0], acc, torch_dtype(n.dtype));
    }
    case OpKind::Input:
      break;
  }
  throw_input_error("device torch: no PyTorch lowering for op {}", engine::op_name(n.kind));
}

std::string unsupported_common(const engine::EngineOptions& o, const engine::EngineOptions& d,
                               bool cuda) {
  if (o.reduce_tile != d.reduce_tile) {
    return cuda ? "reduce_tile: Inductor picks Triton reduction block sizes by its own heuristics; "
                  "no per-graph setting"
                : "reduce_tile: Inductor has no reduction tile on CPU (sums cascade in fixed "
                  "4096-element chunks per "
                  "thread; split_reductions never splits on CPU)";
  }
  if (o.accumulator != d.accumulator)
    return "accumulator: PyTorch and Inductor always accumulate f16/bf16 reductions in fp32";
  if (o.rsqrt != d.rsqrt)
    return "rsqrt: PyTorch and Inductor have no Newton-Raphson rsqrt (Inductor emits 1/sqrt)";
  if (o.div != d.div) return "div: PyTorch and Inductor have no Newton-Raphson division";
  return {};
}

std::string torch_cpu_unsupported(const engine::EngineOptions& o, bool fused) {
  const engine::EngineOptions d;
  if (auto why = unsupported_common(o, d, false); !why.empty()) return why;
  if (o.fma_contraction && !fused)
    return "fma_contraction: PyTorch's eager kernels are precompiled (no contraction switch)";
  return {};
}

std::string torch_cuda_unsupported(const engine::EngineOptions& o, bool fused) {
  const engine::EngineOptions d;
  if (auto why = unsupported_common(o, d, true); !why.empty()) return why;
  if (o.fma_contraction != d.fma_contraction) {
    return "fma_contraction: Triton contracts a*b+c into FMA by itself; Inductor exposes no switch "
           "for it";
  }
  if (o.threads != d.threads) return "threads: a GPU kernel's parallelism is not a thread count";
  (void)fused;
  return {};
}

nlohmann::json torch_cpu_settings(const engine::EngineOptions& o, bool fused) {
  nlohmann::json s = {{"threads", o.threads}};
  if (fused) {
    s["inductor"] = {
        {"emulate_precision_casts", o.emulate_per_op_rounding},
        {"cpp.enable_floating_point_contract_flag", o.fma_contraction ? "fast" : "off"},
        {"cpp.threads", o.threads}};
  }
  return s;
}

nlohmann::json torch_cuda_settings(const engine::EngineOptions& o, bool fused) {
  nlohmann::json s = {{"device", "cuda"}};
  if (fused) s["inductor"] = {{"emulate_precision_casts", o.emulate_per_op_rounding}};
  return s;
}

std::string torch_dtype_unsupported(DType d) {
  if (d == DType::u16 || d == DType::u32 || d == DType::u64) {
    return "PyTorch has almost no kernels for unsigned 16/32/64-bit integers (uint8 only)";
  }
  return {};
}

const char* const kTorchPreamble = R"(import json

import torch
import torch.nn.functional as F

_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
           "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8,
           "boolean": torch.bool})";

const char* const kTorchReproMain = R"(def _input(directory, name, dtype, shape, device):
    if directory:
        import numpy as np
        array = np.load(f"{directory}/{name}.npy")
        if array.dtype.names == ("bf16",):  # fusebench stores bf16 as its uint16 bits
            return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16).to(device)
        return torch.from_numpy(array).to(device)
    if _DTYPES[dtype].is_floating_point:
        return torch.empty(shape, dtype=_DTYPES[dtype], device=device).uniform_(-1, 1)
    return torch.zeros(shape, dtype=_DTYPES[dtype], device=device)


if __name__ == "__main__":
    import os
    import sys
    import importlib
    for _module in filter(None, os.environ.get("FUSEBENCH_TORCH_BACKEND_MODULES", "").split(",")):  # a team's backend
        importlib.import_module(_module) if not _module.endswith(".py") else exec(open(_module).read())
    torch.manual_seed(0)
    device = SETTINGS.get("device", "cpu")
    args = [_input(sys.argv[1] if len(sys.argv) > 1 else None, *spec, device) for spec in INPUTS]
    if SETTINGS.get("threads"):
        torch.set_num_threads(SETTINGS["threads"])
    eager = graph_fn(*args)
    backend = SETTINGS.get("backend", "inductor")
    with torch._inductor.config.patch(SETTINGS.get("inductor", {})):
        fused = torch.compile(graph_fn, backend=backend, fullgraph=not SETTINGS.get("graph_breaks"), dynamic=False)(*args)
    for i, (e, f) in enumerate(zip(eager, fused)):
        differ = int(((e != f) & ~(e.isnan() & f.isnan())).sum()) if e.is_floating_point() else int((e != f).sum())
        print(f"output {i} {tuple(e.shape)} {e.dtype}: {differ} of {e.numel()} elements differ, eager vs torch.compile, "
              f"backend {backend}")
)";
}  // namespace

// Backends that do not run Inductor: Inductor's options (per-op rounding, contraction, its thread
// count) cannot reach their code. Any other backend gets the options patched into
// torch._inductor.config around its compile; whether it honours them is for the suites to measure
// (task A's negative control says so).
const std::set<std::string>& backends_without_inductor() {
  static const std::set<std::string> names = {
      "eager", "aot_eager", "aot_eager_decomp_partition", "aot_eager_default_partitioner", "aot_ts",
      "ts",    "cudagraphs"};
  return names;
}

bool runs_inductor(const std::string& backend) {
  return backends_without_inductor().count(backend) == 0;
}

bool builtin_torch_backend(const std::string& backend) {
  return backend == "inductor" || backends_without_inductor().count(backend) == 1;
}

// Inductor's options that turn one of its own mechanisms off for the whole graph
// (../shared/research/fusers.md §1 has the facts; devices/README.md the table). Decompositions
// have no such switch. split_reductions changes nothing on CPU (its reductions never split).
std::vector<engine::CompilerSwitch> inductor_switches(const std::string& target) {
  std::vector<engine::CompilerSwitch> s = {
      // post-grad rewrites, e.g. matmul + add into addmm (the bias in the GEMM's fp32 accumulator)
      {"pattern_matcher", "false", "pattern rewrite", {}},
      // no two scheduler nodes in one kernel (pointwise ops inlined at lowering stay inlined)
      {"max_fusion_size", "1", "fusion extent", {}},
  };
  if (target == "cpu") {
    // layer_norm's variance: two-pass below 1024 elements a row by default, Welford above; ATen's
    // CPU kernel computes it by Welford (RowwiseMoments) whatever the size
    s.push_back({"cpp.use_two_step_variance_threshold",
                 "0",
                 "variance algorithm",
                 {engine::OpKind::LayerNorm}});
    // scalar code (a simdlen that is no ISA's width selects no vector ISA): erf, exp and tanh
    // from libm instead of at::vec's polynomials, and a permute's elements moved one by one
    // instead of through at::vec's tiled transposes (transpose_mxn)
    s.push_back({"cpp.simdlen",
                 "1",
                 "vectorised code",
                 {engine::OpKind::GeluErf, engine::OpKind::GeluTanh, engine::OpKind::Exp,
                  engine::OpKind::Softmax, engine::OpKind::Permute}});
  } else {
    s.push_back({"split_reductions",
                 "false",
                 "reduction split",
                 {engine::OpKind::Sum, engine::OpKind::Mean, engine::OpKind::Max,
                  engine::OpKind::LayerNorm, engine::OpKind::Softmax}});
  }
  return s;
}

FrameworkSpec torch_spec(const std::string& target, const std::string& compile_backend) {
  FrameworkSpec s;
  const std::string base = target == "cpu" ? "torch" : "torch:" + target;
  const std::string backend = compile_backend.empty() ? "inductor" : compile_backend;
  s.device = compile_backend.empty() ? base : base + "/" + compile_backend;
  s.framework = "torch";
  s.backend = "torch_backend";
  s.backend_dir = FUSEBENCH_TORCH_DIR;
  s.target = target;
  s.compile_backend = backend;
  s.pip_install = FUSEBENCH_TORCH_PIP;
  s.cache_env = "TORCHINDUCTOR_CACHE_DIR";
  s.preamble = kTorchPreamble;
  s.repro_main = kTorchReproMain;
  s.emit_op = torch_op;
  const auto unsupported = target == "cpu" ? torch_cpu_unsupported : torch_cuda_unsupported;
  const auto settings = target == "cpu" ? torch_cpu_settings : torch_cuda_settings;
  if (runs_inductor(backend)) {
    s.unsupported_knobs = unsupported;
    s.compiler_switches = inductor_switches(target);
    s.compiler_section = "inductor";
  } else {
    s.unsupported_knobs = [unsupported, backend](const engine::EngineOptions& o,
                                                 bool fused) -> std::string {
      if (auto why = unsupported(o, fused); !why.empty()) return why;
      const engine::EngineOptions d;
      if (fused && (o.emulate_per_op_rounding != d.emulate_per_op_rounding ||
                    o.fma_contraction != d.fma_contraction)) {
        return fmt::format(
            "{}: torch.compile backend '{}' does not run Inductor, whose option this is",
            o.emulate_per_op_rounding != d.emulate_per_op_rounding ? "emulate_per_op_rounding"
                                                                   : "fma_contraction",
            backend);
      }
      return {};
    };
  }
  s.settings = [settings, backend](const engine::EngineOptions& o, bool fused) {
    nlohmann::json j = settings(o, fused);
    if (fused) j["backend"] = backend;
    // a split is a graph break, which torch.compile(fullgraph=True) refuses
    for (const auto& [op, knobs] : o.per_op) {
      if (fused && knobs.split_after) j["graph_breaks"].push_back(op);
    }
    return j;
  };
  s.split_statement = "torch._dynamo.graph_break()";
  s.dtype_unsupported = torch_dtype_unsupported;
  // an Inductor .so's machine code to count (a backend without generated code reports no kernels)
  s.disassemble = target == "cpu";
  return s;
}

}  // namespace fusebench::framework
