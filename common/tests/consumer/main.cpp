#include <gtest/gtest.h>
#include <fusebench/error_stats.hpp>
#include <fusebench/rng.hpp>
#include <fusebench/testing/matchers.hpp>

TEST(Consumer, UsesTheInstalledToolkitAndMatchers) {
  const fusebench::Tensor ref = fusebench::random_uniform(fusebench::DType::f64, {1000}, -1, 1, 1);
  const fusebench::Tensor y = ref.to(fusebench::DType::f16);
  EXPECT_THAT(y, fusebench::testing::ErrorStatsWithin(ref, {.ulp_max = 0.5}));
  EXPECT_THAT(y, fusebench::testing::BitEqual(y.clone()));
}
