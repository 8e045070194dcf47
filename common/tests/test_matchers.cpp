#include "fusebench/testing/matchers.hpp"

#include <gtest/gtest.h>

#include "fusebench/rng.hpp"

namespace fusebench {
namespace {

using ::fusebench::testing::BitEqual;
using ::fusebench::testing::ErrorStatsWithin;
using ::fusebench::testing::UlpNear;

template <class M>
std::string explain(const M& matcher, const Tensor& value) {
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(matcher.MatchAndExplain(value, &listener));
  return listener.str();
}

TEST(Matchers, PassOnGoodInput) {
  const Tensor a = random_uniform(DType::f16, {64}, -1, 1, 1);
  EXPECT_THAT(a, BitEqual(a.clone()));
  EXPECT_THAT(a, UlpNear(a.clone(), 0));
  EXPECT_THAT(a, ErrorStatsWithin(a.to(DType::f64), {.abs_max = 0.0, .ulp_max = 0.0}));
  const Tensor ref = random_uniform(DType::f64, {4096}, -1, 1, 2);
  EXPECT_THAT(ref.to(DType::f16), ErrorStatsWithin(ref, {.ulp_max = 0.5, .ulp_p99 = 0.5}));
}

TEST(Matchers, FailureMessagesShowIndexValuesAndBits) {
  const Tensor a = random_uniform(DType::f16, {64}, -1, 1, 1);
  Tensor b = a.clone();
  b.span<Half>()[17].bits ^= 0x3;  // 3 ULP away (same sign and binade)
  const std::string bit_message = explain(BitEqual(b), a);
  EXPECT_NE(bit_message.find("1 of 64 elements differ"), std::string::npos) << bit_message;
  EXPECT_NE(bit_message.find("[17] actual="), std::string::npos) << bit_message;
  EXPECT_NE(bit_message.find(fmt::format("(0x{:04x})", a.bits_at(17))), std::string::npos)
      << bit_message;
  const std::string ulp_message = explain(UlpNear(b, 1), a);
  EXPECT_NE(ulp_message.find("max distance"), std::string::npos) << ulp_message;
  EXPECT_NE(ulp_message.find("[17]"), std::string::npos) << ulp_message;
  EXPECT_THAT(a, UlpNear(b, 3));
  const std::string stats_message =
      explain(ErrorStatsWithin(b.to(DType::f64), {.ulp_max = 1.0}), a);
  EXPECT_NE(stats_message.find("ulp.max = "), std::string::npos) << stats_message;
  EXPECT_NE(stats_message.find("[17]"), std::string::npos) << stats_message;
}

TEST(Matchers, NanOnlyMatchesNanAndShapesMustAgree) {
  const std::vector<Half> x = {Half{0x7e00}, Half{0x3c00}}, y = {Half{0x7e00}, Half{0x7e00}};
  const Tensor a = Tensor::from_values<Half>({2}, x), b = Tensor::from_values<Half>({2}, y);
  const std::string message = explain(UlpNear(b, 100), a);
  EXPECT_NE(message.find("1 NaN against a number"), std::string::npos) << message;
  const std::string shape_message = explain(BitEqual(Tensor(DType::f16, {3})), a);
  EXPECT_NE(shape_message.find("cannot compare f16[2] with f16[3]"), std::string::npos)
      << shape_message;
}

}  // namespace
}  // namespace fusebench
