#include "fusebench/testing/matchers.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

namespace fusebench::testing {

namespace {
constexpr std::size_t kShownElements = 8;

std::string hex_bits(const Tensor& t, std::int64_t index) {
  return fmt::format("0x{:0{}x}", t.bits_at(index), 2 * t.element_size());
}
}  // namespace

std::string describe_elements(const Tensor& actual, const Tensor& expected,
                              const std::vector<std::int64_t>& indices) {
  std::string out;
  for (auto index : indices) {
    out += fmt::format("\n  [{}] actual={:.9g} ({}) expected={:.17g} ({})", index,
                       actual.value_at(index), hex_bits(actual, index), expected.value_at(index),
                       hex_bits(expected, index));
  }
  return out;
}

namespace {
bool shapes_comparable(const Tensor& actual, const Tensor& expected, bool same_dtype,
                       ::testing::MatchResultListener* listener) {
  if (actual.shape() != expected.shape() || (same_dtype && actual.dtype() != expected.dtype())) {
    *listener << "cannot compare " << actual.describe() << " with " << expected.describe();
    return false;
  }
  return true;
}

class BitEqualMatcher : public ::testing::MatcherInterface<const Tensor&> {
 public:
  BitEqualMatcher(Tensor expected, BitEqualOptions options)
      : expected_(std::move(expected)), options_(options) {
    options_.max_reported_indices = kShownElements;
  }
  bool MatchAndExplain(const Tensor& actual,
                       ::testing::MatchResultListener* listener) const override {
    if (!shapes_comparable(actual, expected_, true, listener)) return false;
    const auto result = bit_equal(actual, expected_, options_);
    if (!result.equal) {
      *listener << result.mismatches << " of " << result.count << " elements differ; first ones:"
                << describe_elements(actual, expected_, result.first_mismatch_indices);
    }
    return result.equal;
  }
  void DescribeTo(std::ostream* os) const override {
    *os << "is bit-equal to " << expected_.describe();
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "differs in some bit from " << expected_.describe();
  }

 private:
  Tensor expected_;
  BitEqualOptions options_;
};

class UlpNearMatcher : public ::testing::MatcherInterface<const Tensor&> {
 public:
  UlpNearMatcher(Tensor expected, std::uint64_t max_ulp)
      : expected_(std::move(expected)), max_ulp_(max_ulp) {}
  bool MatchAndExplain(const Tensor& actual,
                       ::testing::MatchResultListener* listener) const override {
    if (!shapes_comparable(actual, expected_, true, listener)) return false;
    const auto result = ulp_diff(actual, expected_);
    const Tensor distances = result.distance.to(DType::u64);
    const auto d = distances.span<std::uint64_t>();
    std::vector<std::int64_t> offending;
    std::int64_t nan_mismatch = 0;
    for (std::int64_t i = 0; i < std::int64_t(d.size()); ++i) {
      const bool actual_nan = std::isnan(actual.value_at(i)),
                 expected_nan = std::isnan(expected_.value_at(i));
      if (actual_nan || expected_nan) {
        if (actual_nan != expected_nan) {
          ++nan_mismatch;
          offending.push_back(i);
        }
      } else if (d[std::size_t(i)] > max_ulp_) {
        offending.push_back(i);
      }
    }
    if (offending.empty()) return true;
    // Worst first: NaN mismatches, then by distance.
    std::stable_sort(offending.begin(), offending.end(),
                     [&](auto x, auto y) { return d[std::size_t(x)] > d[std::size_t(y)]; });
    offending.resize(std::min(offending.size(), kShownElements));
    *listener << result.nan_pairs << " NaN pairs (" << nan_mismatch
              << " NaN against a number); max distance " << result.max_distance << " ULP at ["
              << result.max_index << "] (limit " << max_ulp_
              << "); worst elements:" << describe_elements(actual, expected_, offending);
    return false;
  }
  void DescribeTo(std::ostream* os) const override {
    *os << "is within " << max_ulp_ << " ULP of " << expected_.describe();
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is more than " << max_ulp_ << " ULP away from " << expected_.describe() << " somewhere";
  }

 private:
  Tensor expected_;
  std::uint64_t max_ulp_;
};

class ErrorStatsMatcher : public ::testing::MatcherInterface<const Tensor&> {
 public:
  ErrorStatsMatcher(Tensor reference, ErrorLimits limits)
      : reference_(std::move(reference)), limits_(limits) {}
  bool MatchAndExplain(const Tensor& actual,
                       ::testing::MatchResultListener* listener) const override {
    if (!shapes_comparable(actual, reference_, false, listener)) return false;
    const ErrorStats stats = error_stats(actual, reference_);
    std::vector<std::string> broken;
    auto check = [&](const char* name, const std::optional<double>& limit, double value) {
      if (limit && !(value <= *limit))
        broken.push_back(fmt::format("{} = {:.6g} > {:.6g}", name, value, *limit));
    };
    check("abs.max", limits_.abs_max, stats.abs.max);
    check("abs.p99", limits_.abs_p99, stats.abs.p99);
    check("rel.max", limits_.rel_max, stats.rel.max);
    check("rel.p99", limits_.rel_p99, stats.rel.p99);
    check("ulp.max", limits_.ulp_max, stats.ulp_error.max);
    check("ulp.p99", limits_.ulp_p99, stats.ulp_error.p99);
    check("ulp.mean", limits_.ulp_mean, stats.ulp_error.mean);
    if (!limits_.allow_nonfinite_mismatches && stats.mismatches > 0) {
      broken.push_back(fmt::format("{} non-finite mismatches", stats.mismatches));
    }
    if (broken.empty()) return true;
    *listener << fmt::format("{}", fmt::join(broken, "; "));
    std::vector<std::int64_t> worst;
    for (auto index : {stats.ulp_error.max_index, stats.abs.max_index, stats.rel.max_index}) {
      if (index >= 0 && std::find(worst.begin(), worst.end(), index) == worst.end())
        worst.push_back(index);
    }
    for (auto index : stats.first_mismatch_indices) {
      if (worst.size() < kShownElements) worst.push_back(index);
    }
    *listener << "; worst elements (max ulp, abs, rel, then non-finite mismatches):"
              << describe_elements(actual, reference_, worst);
    return false;
  }
  void DescribeTo(std::ostream* os) const override {
    *os << "has error statistics within limits against " << reference_.describe();
  }

 private:
  Tensor reference_;
  ErrorLimits limits_;
};
}  // namespace

::testing::Matcher<const Tensor&> BitEqual(Tensor expected, BitEqualOptions options) {
  return ::testing::MakeMatcher(new BitEqualMatcher(std::move(expected), options));
}
::testing::Matcher<const Tensor&> UlpNear(Tensor expected, std::uint64_t max_ulp) {
  return ::testing::MakeMatcher(new UlpNearMatcher(std::move(expected), max_ulp));
}
::testing::Matcher<const Tensor&> ErrorStatsWithin(Tensor reference, ErrorLimits limits) {
  return ::testing::MakeMatcher(new ErrorStatsMatcher(std::move(reference), limits));
}

}  // namespace fusebench::testing
