// The xla devices: JAX through the Python bridge (devices/bridge).
//   xla       XLA:CPU;
//   xla:cuda  XLA:CUDA, the same graphs on an NVIDIA GPU through JAX's CUDA plugin
//             (jax-cuda13-plugin, `pip install jax[cuda13]`).
//   eager: one jax.jit per op (graph_fn.eager: each op node a module-level jitted function, its
//          value rounded to its dtype once, at its output, as a JAX user's un-fused code runs);
//   fused: jax.jit of the whole graph, lowered and compiled once per graph and settings.
// Scalars are Python scalars (`x * 0.7`: JAX makes a weakly typed constant of x's dtype, so the
// scalar is rounded to f16 for an f16 x, unlike PyTorch's fp32 opmath); the broadcast lowering is
// `x * jnp.full_like(x, 0.7)`. layernorm is written as Flax's LayerNorm computes it (statistics
// in fp32, the result in x's dtype), since JAX has no layer-norm op.
// Knob mapping: emulate_per_op_rounding -> xla_allow_excess_precision=false on both; neither
// XLA:CPU nor XLA:CUDA has a thread count, contraction-only, tile or Newton knob
// (devices/README.md).
#include <fmt/format.h>

#include <fmt/ranges.h>
#include <cmath>

#include <thread>

#include "framework_devices.hpp"

namespace fusebench::framework {

namespace {
using engine::OpKind;

std::string jnp_dtype(DType d) {
  switch (d) {
    case DType::f16:
      return "jnp.float16";
    case DType::bf16:
      return "jnp.bfloat16";
    case DType::f32:
      return "jnp.float32";
    case DType::f64:
      return "jnp.float64";
    case DType::boolean:
      return "jnp.bool_";
    default:
      return fmt::format("jnp.{}", [&] {
        std::string n(dtype_name(d));
        return (n[0] == 'i' ? "int" : "uint") + n.substr(1);
      }());
  }
}

std::string tuple(const std::vector<std::int64_t>& v) {
  return v.size() == 1 ? fmt::format("({},)", v[0]) : fmt::format("({})", fmt::join(v, ", "));
}
std::string tuple(const std::vector<int>& v) {
  return v.size() == 1 ? fmt::format("({},)", v[0]) : fmt::format("({})", fmt::join(v, ", "));
}

std::string xla_op(const engine::Node& n, const std::vector<std::string>& a,
                   const engine::EngineOptions& o) {
  const bool broadcast = o.scalar_lowering == engine::ScalarLowering::BroadcastTensor;
  const char* keep = n.keepdim ? "True" : "False";
  switch (n.kind) {
    case OpKind::Add:
      return fmt::format("jnp.add({}, {})", a[0], a[1]);
    case OpKind::Sub:
      return fmt::format("jnp.subtract({}, {})", a[0], a[1]);
    case OpKind::Mul:
      return fmt::format("jnp.multiply({}, {})", a[0], a[1]);
    case OpKind::Div:
      return fmt::format("jnp.divide({}, {})", a[0], a[1]);
    case OpKind::AddScalar:
      return broadcast ? fmt::format("{0} + jnp.full_like({0}, {1})", a[0], n.scalar)
                       : fmt::format("{} + {}", a[0], n.scalar);
    case OpKind::MulScalar:
      return broadcast ? fmt::format("{0} * jnp.full_like({0}, {1})", a[0], n.scalar)
                       : fmt::format("{} * {}", a[0], n.scalar);
    case OpKind::Neg:
      return fmt::format("jnp.negative({})", a[0]);
    case OpKind::Exp:
      return fmt::format("jnp.exp({})", a[0]);
    case OpKind::Sqrt:
      return fmt::format("jnp.sqrt({})", a[0]);
    case OpKind::Rsqrt:
      return fmt::format("lax.rsqrt({})", a[0]);
    case OpKind::GeluErf:
      return fmt::format("jax.nn.gelu({}, approximate=False)", a[0]);
    case OpKind::GeluTanh:
      return fmt::format("jax.nn.gelu({}, approximate=True)", a[0]);
    case OpKind::Cast:
      return fmt::format("{}.astype({})", a[0], jnp_dtype(n.dtype));
    case OpKind::Sum:
      return fmt::format("jnp.sum({}, axis={}, keepdims={})", a[0], n.axis, keep);
    case OpKind::Mean:
      return fmt::format("jnp.mean({}, axis={}, keepdims={})", a[0], n.axis, keep);
    case OpKind::Max:
      return fmt::format("jnp.max({}, axis={}, keepdims={})", a[0], n.axis, keep);
    case OpKind::LayerNorm:
      return fmt::format("_layer_norm({}, {}, {}, eps={})", a[0], a[1], a[2], n.eps);
    case OpKind::Softmax:
      return fmt::format("jax.nn.softmax({}, axis=-1)", a[0]);
    case OpKind::Matmul:
      return fmt::format("jnp.matmul({}, {})", a[0], a[1]);
    case OpKind::Permute:
      return fmt::format("jnp.transpose({}, {})", a[0], tuple(n.permutation));
    case OpKind::Reshape:
      return fmt::format("jnp.reshape({}, {})", a[0], tuple(n.shape));
    case OpKind::Slice:
      return fmt::format("lax.slice_in_dim({}, {}, {}, axis={})", a[0], n.start,
                         n.start + n.shape[std::size_t(n.axis)], n.axis);
    case OpKind::Concat:
      return fmt::format("jnp.concatenate([{}], axis={})", fmt::join(a, ", "), n.axis);
    case OpKind::Expand:
      return fmt::format("jnp.broadcast_to({}, {})", a[0], tuple(n.shape));
    // Task E's ops: jnp's log, the gelu backward by JAX's own autodiff, the mask as a where.
    case OpKind::Log:
      return fmt::format("jnp.log({})", a[0]);
    case OpKind::GeluTanhBackward:
      return fmt::format("jax.vjp(lambda v: jax.nn.gelu(v, approximate=True), {1})[1]({0})[0]",
                         a[0], a[1]);
    case OpKind::CausalMask: {
      const auto rows = n.shape[n.shape.size() - 2], cols = n.shape.back();
      const double v = n.scalar;
      const std::string fill = std::isnan(v)   ? "float('nan')"
                               : std::isinf(v) ? (v > 0 ? "float('inf')" : "float('-inf')")
                                               : fmt::format("{}", v);
      return fmt::format(
          "jnp.where(jnp.triu(jnp.ones(({1}, {2}), dtype=bool), 1), jnp.asarray({3}, {0}.dtype), "
          "{0})",
          a[0], rows, cols, fill);
    }
    // Embedding rows, and their backward as a scatter-add into zeros accumulated in fp32 (fp64 for
    // f64) and rounded once, as the engine's ops define it.
    case OpKind::GatherRows:
      return fmt::format("jnp.take({}, {}, axis=0)", a[0], a[1]);
    case OpKind::ScatterAddRows: {
      const std::string acc = n.dtype == DType::f64 ? "jnp.float64" : "jnp.float32";
      return fmt::format("jnp.zeros(({}, {}), {}).at[{}].add({}.astype({})).astype({})", n.shape[0],
                         n.shape[1], acc, a[1], a[0], acc, jnp_dtype(n.dtype));
    }
    case OpKind::Input:
      break;
  }
  throw_input_error("device xla: no JAX lowering for op {}", engine::op_name(n.kind));
}

// The knobs neither XLA:CPU nor XLA:CUDA has; `platform` names the one asked.
std::string xla_unsupported_common(const engine::EngineOptions& o, const engine::EngineOptions& d,
                                   const char* platform) {
  if (o.reduce_tile != d.reduce_tile)
    return fmt::format("reduce_tile: {} chooses its reduction loops itself; no tile option",
                       platform);
  if (o.accumulator != d.accumulator)
    return "accumulator: jnp reductions of f16/bf16 always accumulate in fp32";
  if (o.rsqrt != d.rsqrt) return "rsqrt: XLA has no Newton-Raphson rsqrt option";
  if (o.div != d.div) return "div: XLA has no Newton-Raphson division option";
  return {};
}

std::string xla_unsupported(const engine::EngineOptions& o, bool fused) {
  const engine::EngineOptions d;
  if (auto why = xla_unsupported_common(o, d, "XLA:CPU"); !why.empty()) return why;
  if (o.fma_contraction != d.fma_contraction) {
    return "fma_contraction: XLA:CPU has no contraction-only switch (xla_cpu_enable_fast_math "
           "would also reassociate "
           "and drop NaN/inf semantics)";
  }
  if (o.threads != int(std::thread::hardware_concurrency())) {
    return fmt::format(
        "threads={}: XLA:CPU has no thread-count option; it uses every core ({} here)", o.threads,
        std::thread::hardware_concurrency());
  }
  (void)fused;
  return {};
}

std::string xla_cuda_unsupported(const engine::EngineOptions& o, bool fused) {
  const engine::EngineOptions d;
  if (auto why = xla_unsupported_common(o, d, "XLA:CUDA"); !why.empty()) return why;
  if (o.fma_contraction != d.fma_contraction) {
    // XLA:GPU builds its NVPTX target with LLVM's FPOpFusion::Fast and no flag to change it.
    return "fma_contraction: XLA:CUDA's NVPTX back end contracts a*b+c into FMA by itself; XLA "
           "exposes no switch for it";
  }
  if (o.threads != d.threads) return "threads: a GPU kernel's parallelism is not a thread count";
  (void)fused;
  return {};
}

nlohmann::json xla_settings(const engine::EngineOptions& o, bool fused) {
  nlohmann::json s = nlohmann::json::object();
  if (fused) {
    s["xla"] = nlohmann::json::object();
    // Excess precision lets XLA keep f16/bf16 intermediates of a fusion in f32; off, every op's
    // value is rounded to its type as eager stores it.
    if (o.emulate_per_op_rounding) s["xla"]["xla_allow_excess_precision"] = false;
  }
  return s;
}

std::string xla_dtype_unsupported(DType) { return {}; }

// per-op rounding: the op's value rounded to its f16 / bf16 format at its output (_round_to_format
// in the preamble), as eager (one jax.jit per op) stores it
std::string xla_rounded_op(const std::string& expression, const std::vector<std::string>&) {
  return fmt::format("_round_to_format({})", expression);
}

// eager: the op's expression as a jax.jit of its own, static arguments (axes, shapes, constants)
// baked into the lambda, so jit's cache holds one executable per op and input shapes and dtypes
std::string xla_eager_op(const std::string& expression, const std::vector<std::string>& operands) {
  return fmt::format("jax.jit(lambda {}: {})", fmt::join(operands, ", "), expression);
}

const char* const kXlaPreamble = R"(import json

import jax

jax.config.update("jax_enable_x64", True)  # f64 / i64 stay 64-bit, as fusebench's tensors are
import jax.numpy as jnp
from jax import lax


def _layer_norm(x, weight, bias, eps):
    """As Flax's LayerNorm: mean and variance in (at least) fp32, the result in x's dtype."""
    compute = jnp.promote_types(x.dtype, jnp.float32)
    xf = x.astype(compute)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * lax.rsqrt(var + eps) * weight.astype(compute) + bias.astype(compute)
    return y.astype(x.dtype)


# The fusion switch rounding=on at an op: the op's value rounded to its f16 / bf16 format by
# lax.reduce_precision (XLA keeps it in the optimised HLO, and it rounds where excess precision
# would keep the value wider), as eager, one jax.jit per op, stores each op's value. Inside the op
# XLA may keep its primitives wider, in the fused graph as in eager's jit of the op alone.
_FORMATS = {jnp.dtype(jnp.float16): (5, 10), jnp.dtype(jnp.bfloat16): (8, 7)}


def _round_to_format(value):
    bits = _FORMATS.get(jnp.dtype(getattr(value, "dtype", jnp.float32)))
    return lax.reduce_precision(value, *bits) if bits else value
)";

// The repro's __main__, in parts: XLA:CUDA's puts the arrays on the GPU first and says where the
// outputs were compared; XLA:CPU's is what it has always been. kXlaReproRun ends inside the last
// print's f-string, which xla_repro_main closes.
const char* const kXlaReproInputs =
    R"(_DTYPES = {"f16": jnp.float16, "bf16": jnp.bfloat16, "f32": jnp.float32, "f64": jnp.float64}


def _input(directory, name, dtype, shape, key):
    import numpy as np
    if directory:
        array = np.load(f"{directory}/{name}.npy")
        if array.dtype.names == ("bf16",):  # fusebench stores bf16 as its uint16 bits
            import ml_dtypes
            array = array.view(np.uint16).view(ml_dtypes.bfloat16)
        return jnp.asarray(array)
    return jax.random.uniform(key, shape, minval=-1, maxval=1).astype(_DTYPES.get(dtype, jnp.float32))


if __name__ == "__main__":
)";

const char* const kXlaReproOnCuda =
    R"(    jax.config.update("jax_default_device", jax.devices("cuda")[0])  # XLA:CUDA, as fusebench ran it
)";

const char* const kXlaReproRun = R"(    import sys
    keys = jax.random.split(jax.random.PRNGKey(0), len(INPUTS))
    args = [_input(sys.argv[1] if len(sys.argv) > 1 else None, *spec, key) for spec, key in zip(INPUTS, keys)]
    eager = graph_fn.eager(*args)  # one jax.jit per op, as the device's eager runs it
    fused = args  # a fusion switch split cuts graph_fn into stages, each compiled apart
    for stage in getattr(graph_fn, "stages", [graph_fn]):
        fused = jax.jit(stage).lower(*fused).compile(compiler_options=SETTINGS.get("xla") or None)(*fused)
    for i, (e, f) in enumerate(zip(eager, fused)):
        differ = int(jnp.sum((e != f) & ~(jnp.isnan(e) & jnp.isnan(f)))) if jnp.issubdtype(e.dtype, jnp.inexact) else int(jnp.sum(e != f))
        print(f"output {i} {e.shape} {e.dtype}: {differ} of {e.size} elements differ, op by op vs jax.jit)";

std::string xla_repro_main(const std::string& target) {
  if (target == "cpu") return std::string(kXlaReproInputs) + kXlaReproRun + "\")\n";
  return std::string(kXlaReproInputs) + kXlaReproOnCuda + kXlaReproRun + " on XLA:CUDA\")\n";
}

nlohmann::json xla_cuda_settings(const engine::EngineOptions& o, bool fused) {
  nlohmann::json s = xla_settings(o, fused);
  s["device"] = "cuda";  // what the repro and the trace say; the worker's target is the device's
  return s;
}
}  // namespace

FrameworkSpec xla_spec(const std::string& target) {
  if (target != "cpu" && target != "cuda")
    throw_input_error("device xla: target {} is neither cpu nor cuda", target);
  const bool cuda = target == "cuda";
  FrameworkSpec s;
  s.device = cuda ? "xla:cuda" : "xla";
  s.framework = "jax";
  s.backend = "xla_backend";
  s.backend_dir = FUSEBENCH_XLA_DIR;
  s.target = target;
  s.pip_install = FUSEBENCH_JAX_PIP;
  // JAX's persistent compilation cache, <kernel cache>-jax by default: a second run loads each
  // executable instead of compiling it; task A's cold rounds get an emptied directory of their own.
  s.cache_env = "JAX_COMPILATION_CACHE_DIR";
  s.preamble = kXlaPreamble;
  s.repro_main = xla_repro_main(target);
  s.emit_op = xla_op;
  s.eager_op_function = xla_eager_op;
  s.eager_description = "one jax.jit per op, each op's value rounded once, at its output";
  s.unsupported_knobs = cuda ? xla_cuda_unsupported : xla_unsupported;
  s.settings = cuda ? xla_cuda_settings : xla_settings;
  // XLA's fusion passes off: every op is a kernel of its own (a one-op "wrapped" fusion in the
  // optimised HLO), its value stored in its dtype. An unknown pass name is ignored by XLA, so the
  // bridge tests check the HLO (XLA:CUDA's in the gpu tests). XLA:CPU fuses in "fusion"; XLA:CUDA
  // in "priority-fusion" (older XLA: "fusion"), then merges kernels in "multi_output_fusion" and
  // "horizontal_loop_fusion". Fast math is off on both paths by default, so it is no candidate.
  s.compiler_switches = {
      {"xla_disable_hlo_passes",
       cuda ? "fusion,priority-fusion,multi_output_fusion,horizontal_loop_fusion" : "fusion",
       "fusion pass",
       {}}};
  s.compiler_section = "xla";
  // Per-op switches: a split cuts the jitted function into stages (two jits at that op, since
  // nothing breaks a jax.jit), and per-op rounding rounds the op's value at its output
  // (lax.reduce_precision, _round_to_format in the preamble).
  s.split_into_stages = true;
  s.rounded_op = xla_rounded_op;
  s.dtype_unsupported = xla_dtype_unsupported;
  s.disassemble = false;
  if (cuda) {
    // JAX takes 75 % of the GPU's memory when its CUDA client starts, unless told not to. A run
    // has several workers on one GPU at once (this device's, a cold round's, torch:cuda's), so
    // each takes what it uses. A value the environment sets is kept.
    s.worker_env_defaults["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false";
  }
  return s;
}

}  // namespace fusebench::framework
