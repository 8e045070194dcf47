// The numerics knobs of the engine: one struct, printable, recorded in results and part of every
// kernel-cache key. Eager and fused execution honour the same knobs, so that eager/fused
// differences come only from where values are rounded to their storage dtype, except
// fma_contraction (fused kernels only: eager kernels are precompiled without contraction) and
// emulate_per_op_rounding (fused only, by definition).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace fusebench::engine {

enum class AccumulatorDtype { F32, Storage };  // Storage: round the running sum after each add
enum class ApproxMode { Ieee, NewtonBitTrick, NewtonHardware };  // seed of Newton-Raphson
enum class ScalarLowering { ImmediateF32, BroadcastTensor };

// One op's knobs where they differ from the graph-wide ones: an entry of a fusion switch list
// (docs/fusion-switches.md). Unset fields keep the graph-wide value. Only the fused executor reads
// them; eager runs every op with the graph-wide knobs.
struct OpKnobs {
  std::optional<std::int64_t> reduce_tile;  // the op's reduction (reduction and rowwise anchors)
  std::optional<AccumulatorDtype> accumulator;
  std::optional<ApproxMode> rsqrt, div;
  std::optional<int> rsqrt_newton_iters, div_newton_iters;
  std::optional<ScalarLowering> scalar_lowering;
  // for the whole kernel that computes the op: FP contraction is a compiler flag, not an op's
  std::optional<bool> fma_contraction;
  // the op's value rounded to its dtype inside the kernel, as eager stores and reloads it
  std::optional<bool> emulate_per_op_rounding;
  // the op's value is stored, and its consumers read it from memory in a kernel of their own
  bool split_after = false;
  // a framework's compile options by name (Inductor's config, XLA's debug options), set for the
  // whole graph only: a device lists the ones it offers (Device::compiler_switches)
  std::map<std::string, std::string> compiler_options;

  bool empty() const;
  // "tile=1024 rounding=on split compiler:pattern_matcher=false" (set fields only)
  std::string describe() const;
  void merge(const OpKnobs& other);  // other's set fields over these
};

struct EngineOptions {
  std::int64_t reduce_tile = 1024;  // elements per partial sum of a reduction
  AccumulatorDtype accumulator = AccumulatorDtype::F32;
  ApproxMode rsqrt = ApproxMode::Ieee;  // also the rsqrt inside layernorm
  int rsqrt_newton_iters = 2;           // 0..3, when rsqrt is Newton
  ApproxMode div = ApproxMode::Ieee;    // reciprocal seed + Newton, then multiply
  int div_newton_iters = 2;             // 0..3, when div is Newton
  // ImmediateF32: x * c with c an fp32 constant (a "muls" instruction). BroadcastTensor: c
  // rounded to x's storage dtype, materialised as a tensor, multiplied element-wise.
  ScalarLowering scalar_lowering = ScalarLowering::ImmediateF32;
  bool fma_contraction = false;
  // fused: round every op's value to its dtype, as eager does
  bool emulate_per_op_rounding = false;
  int threads = 2;
  // by node name: the fused executor's per-op switches
  std::map<std::string, OpKnobs> per_op;
  // a framework device's compile options (name -> value as text), fused only; empty: its defaults
  std::map<std::string, std::string> compiler_options;

  // The knobs that hold at op `name`: the graph-wide ones with its entry of per_op applied (the
  // result's per_op is empty).
  EngineOptions at_op(const std::string& name) const;
  // These knobs with k's set fields applied graph-wide (per_op kept; k.split_after ignored).
  EngineOptions with_knobs(const OpKnobs& k) const;
  // Throws InputError naming the knob and the value when out of range.
  void validate() const;
  // "tile=1024 acc=f32 rsqrt=ieee ...", and "per-op: a(...) b(...)" where per_op is not empty
  std::string describe() const;
  nlohmann::json to_json() const;
};

}  // namespace fusebench::engine
