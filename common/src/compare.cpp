#include "fusebench/compare.hpp"

#include "ulp_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace fusebench {

namespace {
constexpr std::int64_t kBlock = 4096;  // fits the narrowest counter (u16) and L1

template <class Bits>
const Bits* bits_pointer(const Tensor& t) {
  return reinterpret_cast<const Bits*>(t.raw_data());
}

void push_index(std::vector<std::int64_t>& indices, std::size_t limit, std::int64_t index) {
  if (indices.size() < limit) indices.push_back(index);
}
}  // namespace

// ---- bit_equal
namespace {
template <class T>
BitEqualResult bit_equal_floating(const Tensor& a, const Tensor& b,
                                  const BitEqualOptions& options) {
  using F = FormatTraits<T>;
  using Bits = typename F::Bits;
  const Bits* pa = bits_pointer<Bits>(a);
  const Bits* pb = bits_pointer<Bits>(b);
  BitEqualResult result;
  result.count = a.numel();
  for (std::int64_t begin = 0; begin < result.count; begin += kBlock) {
    const std::int64_t end = std::min(result.count, begin + kBlock);
    // Equal blocks are the common case; memcmp decides them at memory speed.
    if (std::memcmp(pa + begin, pb + begin, std::size_t(end - begin) * sizeof(Bits)) == 0) continue;
    for (std::int64_t i = begin; i < end; ++i) {
      const Bits x = pa[i], y = pb[i];
      if (x == y) continue;
      if (options.nan == NanPolicy::AnyNanEqual && is_nan_bits<T>(x) && is_nan_bits<T>(y)) continue;
      if (options.zero == ZeroPolicy::SignedZerosEqual && (x & F::magnitude_mask) == 0 &&
          (y & F::magnitude_mask) == 0) {
        continue;
      }
      ++result.mismatches;
      push_index(result.first_mismatch_indices, options.max_reported_indices, i);
    }
  }
  result.equal = result.mismatches == 0;
  return result;
}

BitEqualResult bit_equal_raw(const Tensor& a, const Tensor& b, const BitEqualOptions& options) {
  BitEqualResult result;
  result.count = a.numel();
  const std::size_t size = a.element_size();
  const std::byte* pa = a.raw_data();
  const std::byte* pb = b.raw_data();
  for (std::int64_t i = 0; i < result.count; ++i) {
    if (std::memcmp(pa + std::size_t(i) * size, pb + std::size_t(i) * size, size) != 0) {
      ++result.mismatches;
      push_index(result.first_mismatch_indices, options.max_reported_indices, i);
    }
  }
  result.equal = result.mismatches == 0;
  return result;
}
}  // namespace

BitEqualResult bit_equal(const Tensor& a_in, const Tensor& b_in, const BitEqualOptions& options) {
  check_same_dtype_and_shape(a_in, b_in, "bit_equal");
  const Tensor a = a_in.contiguous();
  const Tensor b = b_in.contiguous();
  if (!is_floating(a.dtype())) {
    if (std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0) return {true, a.numel(), 0, {}};
    return bit_equal_raw(a, b, options);
  }
  return visit_floating(a.dtype(), "bit_equal",
                        [&](auto tag) { return bit_equal_floating<decltype(tag)>(a, b, options); });
}

// ---- histograms
std::uint64_t UlpHistogram::total() const {
  std::uint64_t sum = 0;
  for (auto c : counts) sum += c;
  return sum;
}

void UlpHistogram::merge(const UlpHistogram& other) {
  if (counts.size() != other.counts.size()) {
    throw_input_error("UlpHistogram::merge: {} bins vs {}", counts.size(), other.counts.size());
  }
  for (std::size_t k = 0; k < counts.size(); ++k) counts[k] += other.counts[k];
  nan_pairs += other.nan_pairs;
}

// ---- ulp_diff
namespace {
template <class T>
UlpDiffResult ulp_diff_typed(const Tensor& a, const Tensor& b, const UlpDiffOptions& options) {
  using Bits = typename FloatFormat<T>::Bits;
  const std::int64_t n = a.numel();
  const Bits* pa = bits_pointer<Bits>(a);
  const Bits* pb = bits_pointer<Bits>(b);
  UlpDiffResult result;
  result.distance = Tensor::uninitialized(dtype_of<Bits>, a.shape());
  Bits* distance = reinterpret_cast<Bits*>(result.distance.raw_data());
  const int exact_bins = options.histogram_bins;
  auto& counts = result.histogram.counts;
  counts.assign(std::size_t(exact_bins + 1), 0);
  Bits max_distance = 0;
  std::int64_t max_index = -1;

  for (std::int64_t begin = 0; begin < n; begin += kBlock) {
    const std::int64_t count = std::min(n, begin + kBlock) - begin;
    const auto block = detail::block_distances<T>(pa + begin, pb + begin, distance + begin, count);
    if (block.nan_pairs != 0) {
      result.nan_pairs += block.nan_pairs;
      for (std::int64_t i = begin;
           i < begin + count && result.first_nan_indices.size() < options.max_reported_indices;
           ++i) {
        if (is_nan_bits<T>(pa[i]) || is_nan_bits<T>(pb[i])) result.first_nan_indices.push_back(i);
      }
    }
    // Rescan only a block that raises the maximum (or holds the first comparable pair).
    if (std::int64_t(block.nan_pairs) < count &&
        (block.max_distance > max_distance || max_index < 0)) {
      for (std::int64_t i = begin; i < begin + count; ++i) {
        if (!is_nan_bits<T>(pa[i]) && !is_nan_bits<T>(pb[i]) &&
            (distance[i] == block.max_distance)) {
          max_distance = block.max_distance;
          max_index = i;
          break;
        }
      }
    }
    detail::block_histogram(distance + begin, count, exact_bins, counts.data());
  }
  // NaN entries hold the type's maximum and fell into the overflow bin: take them out.
  counts[std::size_t(exact_bins)] -= result.nan_pairs;
  result.histogram.nan_pairs = result.nan_pairs;
  result.max_distance = max_distance;
  result.max_index = max_index;
  return result;
}
}  // namespace

UlpDiffResult ulp_diff(const Tensor& a_in, const Tensor& b_in, const UlpDiffOptions& options) {
  check_same_dtype_and_shape(a_in, b_in, "ulp_diff");
  if (options.histogram_bins < 1) {
    throw_input_error("ulp_diff: histogram_bins must be >= 1, got {}", options.histogram_bins);
  }
  const Tensor a = a_in.contiguous();
  const Tensor b = b_in.contiguous();
  return visit_floating(a.dtype(), "ulp_diff",
                        [&](auto tag) { return ulp_diff_typed<decltype(tag)>(a, b, options); });
}

// ---- summary of integer distances
namespace {
// Value of rank k (0-based) among the sorted distances, from counts per distance (u16) or by
// selection on a copy (wider distances).
template <class Bits>
class DistanceRanks {
 public:
  explicit DistanceRanks(std::span<const Bits> distances, Bits no_distance) {
    if constexpr (sizeof(Bits) == 2) {
      counts_.assign(65536, 0);
      for (const Bits d : distances) ++counts_[d];
      counts_[no_distance] = 0;
    } else {
      values_.reserve(distances.size());
      for (const Bits d : distances) {
        if (d != no_distance) values_.push_back(d);
      }
    }
  }
  double at(std::uint64_t rank) {
    if constexpr (sizeof(Bits) == 2) {
      std::uint64_t before = 0;
      for (std::size_t d = 0; d < counts_.size(); ++d) {
        before += counts_[d];
        if (rank < before) return double(d);
      }
      return std::numeric_limits<double>::quiet_NaN();
    } else {
      std::nth_element(values_.begin(), values_.begin() + std::ptrdiff_t(rank), values_.end());
      return double(values_[std::size_t(rank)]);
    }
  }

 private:
  std::vector<std::uint64_t> counts_;
  std::vector<Bits> values_;
};

template <class Bits>
UlpDiffSummary summarize_typed(const UlpDiffResult& result) {
  UlpDiffSummary summary;
  summary.max = result.max_distance;
  summary.max_index = result.max_index;
  const std::span<const Bits> distances = result.distance.span<Bits>();
  summary.compared = distances.size() - result.nan_pairs;
  if (summary.compared == 0) {
    summary.mean = summary.p50 = summary.p99 = std::numeric_limits<double>::quiet_NaN();
    return summary;
  }
  // The histogram counts every compared pair, distances 0 .. bins-1 exactly. A rank that falls
  // there is read from it, and when no distance exceeds the exact bins (small distances, the
  // usual case) so is the sum: no pass over the distances at all.
  const auto& counts = result.histogram.counts;
  const std::uint64_t exact_bins = counts.empty() ? 0 : counts.size() - 1;
  const bool histogram_complete = !counts.empty() && result.histogram.total() == summary.compared;
  auto rank_in_histogram = [&](std::uint64_t rank) -> std::optional<double> {
    if (!histogram_complete) return std::nullopt;
    std::uint64_t before = 0;
    for (std::uint64_t d = 0; d < exact_bins; ++d) {
      before += counts[d];
      if (rank < before) return double(d);
    }
    return std::nullopt;  // beyond the exact bins
  };
  // A NaN pair's entry holds the type's maximum. No real distance reaches it: the largest, -inf
  // against +inf, is twice the infinity's magnitude bits, below the maximum.
  constexpr Bits kNoDistance = std::numeric_limits<Bits>::max();
  // The exact mean: the sum of integer distances is exact in 128 bits for any tensor size.
  unsigned __int128 sum = 0;
  if (histogram_complete && result.max_distance < exact_bins) {
    for (std::uint64_t d = 1; d < exact_bins; ++d) sum += (unsigned __int128)(d)*counts[d];
  } else {
    for (const Bits d : distances) sum += d == kNoDistance ? 0 : d;
  }
  summary.mean = double(sum) / double(summary.compared);
  std::optional<DistanceRanks<Bits>> ranks;  // built only for a rank beyond the histogram
  auto value_at = [&](std::uint64_t rank) {
    if (const auto binned = rank_in_histogram(rank)) return *binned;
    if (!ranks) ranks.emplace(distances, kNoDistance);
    return ranks->at(rank);
  };
  auto percentile_of = [&](double p) {  // numpy's "linear" rule
    const double h = double(summary.compared - 1) * p;
    const auto low = std::uint64_t(std::floor(h));
    const double low_value = value_at(low);
    if (low + 1 >= summary.compared) return low_value;
    return low_value + (h - double(low)) * (value_at(low + 1) - low_value);
  };
  summary.p50 = percentile_of(0.5);
  summary.p99 = percentile_of(0.99);
  return summary;
}
}  // namespace

UlpDiffSummary summarize(const UlpDiffResult& result) {
  switch (result.distance.dtype()) {
    case DType::u16:
      return summarize_typed<std::uint16_t>(result);
    case DType::u32:
      return summarize_typed<std::uint32_t>(result);
    case DType::u64:
      return summarize_typed<std::uint64_t>(result);
    default:
      throw_input_error("summarize: a ulp_diff distance tensor is u16, u32 or u64, got {}",
                        result.distance.describe());
  }
}

// ---- ulp_error
namespace {
template <class Y, class R>
void ulp_error_typed(const Tensor& y, const Tensor& ref, double* out) {
  const Y* py = reinterpret_cast<const Y*>(y.raw_data());
  const R* pr = reinterpret_cast<const R*>(ref.raw_data());
  const std::int64_t n = y.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const double yv = to_double(py[i]);
    const double rv = to_double(pr[i]);
    if (!std::isfinite(yv) || !std::isfinite(rv)) {
      const bool agree = (std::isnan(yv) && std::isnan(rv)) || yv == rv;
      out[i] = agree ? 0.0 : std::numeric_limits<double>::infinity();
      continue;
    }
    // Scaling by a power of two is exact, so the only rounding is the fp64 subtraction.
    const int exponent = spacing_exponent<Y>(rv);
    out[i] = std::ldexp(std::fabs(yv - rv), -exponent);
  }
}
}  // namespace

Tensor ulp_error(const Tensor& y_in, const Tensor& ref_in) {
  check_same_shape(y_in, ref_in, "ulp_error");
  const Tensor y = y_in.contiguous();
  const Tensor ref = ref_in.contiguous();
  Tensor out = Tensor::uninitialized(DType::f64, y.shape());
  double* po = reinterpret_cast<double*>(out.raw_data());
  visit_floating(y.dtype(), "ulp_error (y)", [&](auto y_tag) {
    visit_floating(ref.dtype(), "ulp_error (ref)", [&](auto ref_tag) {
      ulp_error_typed<decltype(y_tag), decltype(ref_tag)>(y, ref, po);
    });
  });
  return out;
}

}  // namespace fusebench
