// The numerics knobs of the engine: one struct, printable, recorded in results and part of every
// kernel-cache key. Eager and fused execution honour the same knobs, so that eager/fused
// differences come only from where values are rounded to their storage dtype, except
// fma_contraction (fused kernels only: eager kernels are precompiled without contraction) and
// emulate_per_op_rounding (fused only, by definition).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace fusebench::engine {

enum class AccumulatorDtype { F32, Storage };  // Storage: round the running sum after each add
enum class ApproxMode { Ieee, NewtonBitTrick, NewtonHardware };  // seed of Newton-Raphson
enum class ScalarLowering { ImmediateF32, BroadcastTensor };

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

  // Throws InputError naming the knob and the value when out of range.
  void validate() const;
  std::string describe() const;  // "tile=1024 acc=f32 rsqrt=ieee ..."
  nlohmann::json to_json() const;
};

}  // namespace fusebench::engine
