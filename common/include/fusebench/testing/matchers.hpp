// GoogleTest matchers over tensors, the C++ counterpart of the plan's pytest fixtures:
//
//   EXPECT_THAT(fused, BitEqual(eager));
//   EXPECT_THAT(y, UlpNear(expected, 1));                 // integer ULP distance <= 1, same dtype
//   EXPECT_THAT(y, ErrorStatsWithin(ref64, {.ulp_max = 1.0, .rel_p99 = 1e-3}));
//
// A failure explains itself: the number of offending elements and the worst few, each with its
// index, both values and both bit patterns.
#pragma once

#include <gmock/gmock.h>

#include <optional>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/tensor.hpp"

namespace fusebench::testing {

::testing::Matcher<const Tensor&> BitEqual(Tensor expected, BitEqualOptions options = {});

// Every pair within max_ulp integer ULPs; a NaN only matches a NaN.
::testing::Matcher<const Tensor&> UlpNear(Tensor expected, std::uint64_t max_ulp);

// Limits on error_stats(actual, reference); unset limits are not checked. Non-finite
// mismatches fail unless allowed.
struct ErrorLimits {
  std::optional<double> abs_max{}, abs_p99{}, rel_max{}, rel_p99{}, ulp_max{}, ulp_p99{},
      ulp_mean{};
  bool allow_nonfinite_mismatches = false;
};
::testing::Matcher<const Tensor&> ErrorStatsWithin(Tensor reference, ErrorLimits limits);

// "  [index] actual=... (0x...) expected=... (0x...)" lines for the given indices.
std::string describe_elements(const Tensor& actual, const Tensor& expected,
                              const std::vector<std::int64_t>& indices);

}  // namespace fusebench::testing
