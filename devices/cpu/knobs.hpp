// Runtime knob values turned into the compile-time function objects of scalar_math.hpp, for the
// precompiled eager kernels (the JIT spells the same objects in its source instead).
#pragma once

#include "fusebench/engine/options.hpp"
#include "fusebench/engine/scalar_math.hpp"
#include "fusebench/error.hpp"

namespace fusebench::cpu {

template <class Fn>
decltype(auto) with_newton_iterations(int iterations, Fn&& fn) {
  switch (iterations) {
    case 0:
      return fn(std::integral_constant<int, 0>{});
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    case 3:
      return fn(std::integral_constant<int, 3>{});
  }
  throw_input_error("Newton iterations must be in 0..3, got {}", iterations);
}

template <class Fn>
decltype(auto) with_rsqrt(const engine::EngineOptions& o, Fn&& fn) {
  switch (o.rsqrt) {
    case engine::ApproxMode::Ieee:
      return fn(fbk::RsqrtIeee{});
    case engine::ApproxMode::NewtonBitTrick:
      return with_newton_iterations(o.rsqrt_newton_iters,
                                    [&](auto n) { return fn(fbk::RsqrtNewtonBitTrick<n>{}); });
    case engine::ApproxMode::NewtonHardware:
      return with_newton_iterations(o.rsqrt_newton_iters,
                                    [&](auto n) { return fn(fbk::RsqrtNewtonHardware<n>{}); });
  }
  throw_input_error("invalid rsqrt mode");
}

template <class Fn>
decltype(auto) with_div(const engine::EngineOptions& o, Fn&& fn) {
  switch (o.div) {
    case engine::ApproxMode::Ieee:
      return fn(fbk::DivIeee{});
    case engine::ApproxMode::NewtonBitTrick:
      return with_newton_iterations(o.div_newton_iters,
                                    [&](auto n) { return fn(fbk::DivNewtonBitTrick<n>{}); });
    case engine::ApproxMode::NewtonHardware:
      return with_newton_iterations(o.div_newton_iters,
                                    [&](auto n) { return fn(fbk::DivNewtonHardware<n>{}); });
  }
  throw_input_error("invalid div mode");
}

// The accumulator rounding for storage type T.
template <class T, class Fn>
decltype(auto) with_accumulator(const engine::EngineOptions& o, Fn&& fn) {
  if (o.accumulator == engine::AccumulatorDtype::Storage) {
    if constexpr (std::is_same_v<T, Half>) return fn(fbk::RoundF16{});
    if constexpr (std::is_same_v<T, BFloat16>) return fn(fbk::RoundBF16{});
  }
  return fn(fbk::NoRounding{});
}

}  // namespace fusebench::cpu
