// error_stats: the driver. It samples the pairs to place each percentile's window, makes the
// counting pass over every pair (on all threads, in chunks merged in order), and finishes the exact
// percentiles from the windows or, where a window missed, from the radix selection's replays. The
// metrics live in error_stats/metrics.hpp, the selectors in error_stats/selection.hpp.
#include "fusebench/error_stats.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "error_stats/metrics.hpp"
#include "error_stats/parallel.hpp"
#include "error_stats/selection.hpp"
#include "ulp_kernels.hpp"

namespace fusebench {

double percentile(std::vector<double>& values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double h = double(values.size() - 1) * p;
  const auto lo = std::size_t(std::floor(h));
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(lo), values.end());
  const double low_value = values[lo];
  if (lo + 1 >= values.size()) return low_value;
  const double high_value =
      *std::min_element(values.begin() + std::ptrdiff_t(lo) + 1, values.end());
  return low_value + (h - double(lo)) * (high_value - low_value);
}

namespace {
using namespace error_stats_internal;

// What one chunk of the stream contributes, merged in chunk order: the results do not depend on
// how many threads ran the chunks.
struct ChunkResult {
  std::int64_t compared = 0, nan_y = 0, nan_ref = 0, inf_y = 0, inf_ref = 0, mismatches = 0;
  std::vector<std::int64_t> first_mismatch_indices;
  std::array<double, kMetrics> max = {-1, -1, -1};
  std::array<std::int64_t, kMetrics> max_index = {-1, -1, -1};
  std::array<CompensatedSum, kMetrics> sums;
  std::vector<std::uint64_t> histogram;
  std::uint64_t nan_pairs = 0;
  std::uint64_t ulp_diff_max = 0;
  std::int64_t ulp_diff_max_index = -1;
};

// Chunks of 2^18 elements: enough work per claim, and few enough partial results.
constexpr std::int64_t kChunk = std::int64_t(1) << 18;
static_assert(kChunk % kBlock == 0);
// Below this size one thread does all: starting threads would cost more than they save.
constexpr std::int64_t kParallelFrom = std::int64_t(1) << 20;

template <class Y, class R>
class ErrorStatsRun {
  using F = FormatTraits<Y>;
  using Bits = typename FloatFormat<Y>::Bits;

 public:
  ErrorStatsRun(const Tensor& y, const Tensor& ref, const ErrorStatsOptions& options)
      : options_(options),
        n_(y.numel()),
        y_(reinterpret_cast<const Y*>(y.raw_data())),
        ref_(reinterpret_cast<const R*>(ref.raw_data())),
        chunks_((n_ + kChunk - 1) / kChunk) {
    int threads = options.threads > 0 ? options.threads
                                      : int(std::max(1u, std::thread::hardware_concurrency()));
    if (n_ < kParallelFrom) threads = 1;
    threads_ = int(std::min<std::int64_t>(threads, std::max<std::int64_t>(chunks_, 1)));
    stats_.dtype = y.dtype();
    stats_.ref_dtype = ref.dtype();
    stats_.count = n_;
    stats_.rel_floor = std::ldexp(1.0, F::min_normal_exponent);
  }

  ErrorStats run() {
    plan_windows();
    count_pass();
    if (stats_.compared == 0) {
      for (ErrorSummary* s : {&stats_.abs, &stats_.rel, &stats_.ulp_error}) {
        s->max = s->mean = s->p50 = s->p99 = std::numeric_limits<double>::quiet_NaN();
      }
      return stats_;
    }
    percentiles();
    return stats_;
  }

 private:
  // Per worker: the block scratch and, per metric, its share of the rank selection.
  struct Worker {
    std::unique_ptr<BlockMetrics<Y, R>> block = std::make_unique<BlockMetrics<Y, R>>();
    std::vector<Bits> rounded_ref = std::vector<Bits>(std::size_t(kBlock));
    std::vector<Bits> distances = std::vector<Bits>(std::size_t(kBlock));
    std::vector<RankSelector> ranks;
    std::vector<WindowSelector> windows;  // when the sample planned intervals
  };

  // ---- the sample: per metric, an interval around each wanted percentile
  static constexpr double kPercentiles[] = {0.5, 0.99};
  static_assert(std::size(kPercentiles) == WindowSelector::kWindows);
  // Half-widths in standard deviations of a sample rank (sqrt(s p (1 - p))): a rank outside its
  // interval is then a 5-sigma event per interval (and costs only time).
  static constexpr double kIntervalSigmas = 5;

  void plan_windows() {
    if (options_.rank_sample_size <= 0 || n_ <= RankSelector::kStoreLimit) return;
    const std::int64_t samples = std::min(options_.rank_sample_size, n_);
    // The sample, a block at a time, shared among the threads: each block's finite metrics land at
    // its own offset, and are then closed up in block order (the same sample for any thread count).
    std::array<std::vector<double>, kMetrics> sampled;
    for (auto& values : sampled) values.resize(std::size_t(samples));
    const std::int64_t blocks = (samples + kBlock - 1) / kBlock;
    std::vector<std::int64_t> block_finite(static_cast<std::size_t>(blocks));
    std::vector<std::unique_ptr<BlockMetrics<Y, R>>> scratch{std::size_t(threads_)};
    for_each_chunk(blocks, threads_, [&](int w, std::int64_t b) {
      auto& block = scratch[std::size_t(w)];
      if (!block) block = std::make_unique<BlockMetrics<Y, R>>();
      const std::int64_t begin = b * kBlock, count = std::min(kBlock, samples - begin);
      std::array<std::int64_t, kBlock> positions;
      for (std::int64_t i = 0; i < count; ++i)
        positions[std::size_t(i)] = detail::rank_sample_position(begin + i, n_, samples);
      // The hashed offsets defeat the hardware's stride prefetcher: prefetch a few samples ahead,
      // so that the cache misses overlap instead of following one another.
      constexpr std::int64_t kAhead = 32;
      std::array<Y, kBlock> y_sample;
      std::array<R, kBlock> ref_sample;
      for (std::int64_t i = 0; i < count; ++i) {
        if (i + kAhead < count) {
          __builtin_prefetch(y_ + positions[std::size_t(i + kAhead)]);
          __builtin_prefetch(ref_ + positions[std::size_t(i + kAhead)]);
        }
        y_sample[std::size_t(i)] = y_[positions[std::size_t(i)]];
        ref_sample[std::size_t(i)] = ref_[positions[std::size_t(i)]];
      }
      block->compute(y_sample.data(), ref_sample.data(), count, stats_.rel_floor);
      for (int m = 0; m < kMetrics; ++m) {
        double* out = sampled[std::size_t(m)].data() + begin;
        std::int64_t kept = 0;
        for (std::int64_t i = 0; i < count; ++i) {
          out[kept] = block->metric[std::size_t(m)][std::size_t(i)];
          kept += block->finite[std::size_t(i)];
        }
        block_finite[std::size_t(b)] = kept;
      }
    });
    std::int64_t finite_count = 0;
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (auto& values : sampled) {
        std::copy_n(values.begin() + b * kBlock, block_finite[std::size_t(b)],
                    values.begin() + finite_count);
      }
      finite_count += block_finite[std::size_t(b)];
    }
    for (auto& values : sampled) values.resize(std::size_t(finite_count));
    const auto finite = std::int64_t(sampled[0].size());
    if (finite < 64) return;  // mostly non-finite: too few to say where the ranks lie
    // The sample ranks of each interval's ends: the same for every metric.
    struct Ends {
      std::int64_t lo_rank, hi_rank;
      double share;  // of the values expected inside
      std::int64_t margin;
    };
    std::array<Ends, std::size(kPercentiles)> ends;
    for (std::size_t q = 0; q < std::size(kPercentiles); ++q) {
      const double p = kPercentiles[q];
      const auto rank = std::int64_t(std::floor(double(finite - 1) * p));
      const auto margin =
          std::int64_t(std::ceil(kIntervalSigmas * std::sqrt(double(finite) * p * (1 - p)))) + 1;
      ends[q] = {rank - margin, rank + 1 + margin, 0, margin};
      // too few sampled values to bound a window below: no windows
      if (ends[q].lo_rank < 0) return;
      ends[q].share =
          double(std::min(ends[q].hi_rank, finite - 1) - ends[q].lo_rank + 1) / double(finite);
    }
    intervals_.emplace();
    // One metric per worker: the selections in the samples are independent.
    for_each_chunk(kMetrics, std::min(threads_, kMetrics), [&](int, std::int64_t m) {
      std::vector<double>& values = sampled[std::size_t(m)];
      // The ranks mostly ascend (lo, hi of P50, then of P99): each selection searches only the
      // side of the previous one that holds its rank.
      std::int64_t selected_from = 0;  // values before this index are no larger than those after
      auto select = [&](std::int64_t rank) {
        if (rank >= selected_from) {
          std::nth_element(values.begin() + selected_from, values.begin() + rank, values.end());
          selected_from = rank + 1;
        } else {
          std::nth_element(values.begin(), values.begin() + rank, values.begin() + selected_from);
        }
        return values[std::size_t(rank)];
      };
      for (std::size_t q = 0; q < std::size(kPercentiles); ++q) {
        WindowSelector::Interval interval;
        interval.lo = select(ends[q].lo_rank);
        interval.hi = ends[q].hi_rank < finite ? select(ends[q].hi_rank)
                                               : std::numeric_limits<double>::infinity();
        // Few ties seen at either end (and lo above the zeros that non-finite pairs count as):
        // half-open, which costs two comparisons per value instead of four and no end counts.
        // Its values equal to lo are kept, about n / s of them per sampled tie (a sixty-fourth of
        // the keep limit at most); a rank among those equal to hi is not found, but hi lies
        // `margin` sample ranks above the wanted ones, eight times a few ties' reach. Discrete
        // errors, whose ends repeat by the hundreds in the sample, count their ends instead.
        const std::int64_t few_ties = std::max<std::int64_t>(1, ends[q].margin / 8);
        auto few_tied = [&](double v) {
          return std::isinf(v) || std::count(values.begin(), values.end(), v) <= few_ties;
        };
        interval.half_open = interval.lo > 0 && interval.lo != interval.hi &&
                             few_tied(interval.lo) && few_tied(interval.hi);
        interval.keeps = interval.half_open ||
                         std::any_of(values.begin(), values.end(),
                                     [&](double v) { return v > interval.lo && v < interval.hi; });
        // Four times the expected share of kept values before the interval counts as misled.
        interval.keep_limit = std::int64_t(4 * ends[q].share * double(n_)) + kBlock;
        (*intervals_)[std::size_t(m)][q] = interval;
      }
    });
  }

  std::int64_t chunk_begin(std::int64_t c) const { return c * kChunk; }
  std::int64_t chunk_end(std::int64_t c) const { return std::min(n_, (c + 1) * kChunk); }

  // ---- pass 1: counts, sums, maxima, the selectors' histograms, the integer ULP histogram
  void count_pass() {
    std::vector<ChunkResult> results(static_cast<std::size_t>(chunks_));
    workers_.resize(std::size_t(threads_));
    for (auto& w : workers_) {
      for (int m = 0; m < kMetrics; ++m) {
        if (intervals_) {
          w.windows.emplace_back((*intervals_)[std::size_t(m)]);
        } else {
          w.ranks.emplace_back(n_);
        }
      }
    }
    stats_.passes = 1;
    for_each_chunk(chunks_, threads_, [&](int w, std::int64_t c) {
      count_chunk(workers_[std::size_t(w)], c, results[std::size_t(c)]);
    });
    // Merge in chunk order.
    const int exact_bins = options_.histogram_bins;
    stats_.ulp_histogram.counts.assign(std::size_t(exact_bins + 1), 0);
    std::array<CompensatedSum, kMetrics> sums;
    std::array<ErrorSummary*, kMetrics> summaries = {&stats_.abs, &stats_.rel, &stats_.ulp_error};
    for (auto* s : summaries) {
      s->max = -1;
      s->max_index = -1;
    }
    for (const ChunkResult& r : results) {
      stats_.compared += r.compared;
      stats_.nan_y += r.nan_y;
      stats_.nan_ref += r.nan_ref;
      stats_.inf_y += r.inf_y;
      stats_.inf_ref += r.inf_ref;
      stats_.mismatches += r.mismatches;
      for (auto index : r.first_mismatch_indices) {
        if (stats_.first_mismatch_indices.size() < options_.max_reported_indices)
          stats_.first_mismatch_indices.push_back(index);
      }
      for (int m = 0; m < kMetrics; ++m) {
        sums[std::size_t(m)].add(r.sums[std::size_t(m)].sum);
        sums[std::size_t(m)].add(r.sums[std::size_t(m)].compensation);
        ErrorSummary& s = *summaries[std::size_t(m)];
        // The first index of the largest value: a later chunk wins only with a larger one.
        if (r.max_index[std::size_t(m)] >= 0 &&
            (s.max_index < 0 || r.max[std::size_t(m)] > s.max)) {
          s.max = r.max[std::size_t(m)];
          s.max_index = r.max_index[std::size_t(m)];
        }
      }
      for (std::size_t k = 0; k < r.histogram.size(); ++k)
        stats_.ulp_histogram.counts[k] += r.histogram[k];
      stats_.ulp_histogram.nan_pairs += r.nan_pairs;
      if (r.ulp_diff_max_index >= 0 &&
          (stats_.ulp_diff_max_index < 0 || r.ulp_diff_max > stats_.ulp_diff_max)) {
        stats_.ulp_diff_max = r.ulp_diff_max;
        stats_.ulp_diff_max_index = r.ulp_diff_max_index;
      }
    }
    // NaN pairs were counted into the overflow bin (their distance entry is all ones).
    stats_.ulp_histogram.counts.back() -= stats_.ulp_histogram.nan_pairs;
    for (int m = 0; m < kMetrics; ++m) {
      mean_sum_[std::size_t(m)] = sums[std::size_t(m)].sum + sums[std::size_t(m)].compensation;
      for (std::size_t w = 1; w < workers_.size(); ++w) {
        if (intervals_) {
          workers_[0].windows[std::size_t(m)].merge(workers_[w].windows[std::size_t(m)]);
        } else {
          workers_[0].ranks[std::size_t(m)].merge_counts(workers_[w].ranks[std::size_t(m)]);
        }
      }
    }
  }

  void count_chunk(Worker& worker, std::int64_t c, ChunkResult& result) {
    BlockMetrics<Y, R>& block = *worker.block;
    result.histogram.assign(std::size_t(options_.histogram_bins + 1), 0);
    for (std::int64_t begin = chunk_begin(c); begin < chunk_end(c); begin += kBlock) {
      const std::int64_t count = std::min(kBlock, n_ - begin);
#if defined(FUSEBENCH_ERROR_STATS_VECTORS)
      // (a selector that overflowed stops counting, which only the block-by-block path knows)
      if constexpr (VectorMetrics<Y, R>::kAvailable) {
        if (count == kBlock && intervals_ &&
            std::none_of(worker.windows.begin(), worker.windows.end(),
                         [](const WindowSelector& w) { return w.overflowed(); })) {
          count_fused_block(worker, begin, result);
          count_distances(worker, begin, count, result, kRoundsReferenceInRegisters);
          continue;
        }
      }
#endif
      block.compute(y_ + begin, ref_ + begin, count, stats_.rel_floor);
      result.compared += count - block.nonfinite;
      if (block.nonfinite != 0) count_nonfinite(block, begin, count, result);
      for (int m = 0; m < kMetrics; ++m) {
        const auto& values = block.metric[std::size_t(m)];
        // Eight independent partial sums in a fixed order: deterministic, and the dependency
        // chain of one running fp64 sum no longer limits the loop (it vectorises).
        alignas(64) std::array<double, kLanes> lane_sum = {}, lane_max = {};
        std::int64_t i = 0;
#if defined(FUSEBENCH_ERROR_STATS_VECTORS)
        // The same lanes as the loop below (GCC leaves that one scalar), in vectors.
        MetricVector sums[kVectors], maxima[kVectors];
        for (int v = 0; v < kVectors; ++v) sums[v] = maxima[v] = vector_zero();
        for (; i + kLanes <= count; i += kLanes) {
          for (int v = 0; v < kVectors; ++v) {
            const MetricVector x = vector_load(values.data() + i + v * kVectorLanes);
            sums[v] = vector_add(sums[v], x);
            maxima[v] = vector_max(x, maxima[v]);  // x > max ? x : max, as below
          }
        }
        store_lanes(sums, lane_sum);
        store_lanes(maxima, lane_max);
#endif
        for (; i + kLanes <= count; i += kLanes) {
          for (int l = 0; l < kLanes; ++l) {
            const double v = values[std::size_t(i + l)];
            lane_sum[std::size_t(l)] += v;
            lane_max[std::size_t(l)] = lane_max[std::size_t(l)] > v ? lane_max[std::size_t(l)] : v;
          }
        }
        for (; i < count; ++i) {
          lane_sum[0] += values[std::size_t(i)];
          lane_max[0] = std::max(lane_max[0], values[std::size_t(i)]);
        }
        add_block_lanes(block, block.nonfinite == 0, m, lane_sum, lane_max, begin, count,
                        block.nonfinite, result);
        if (intervals_) {
          worker.windows[std::size_t(m)].count_block(values.data(), count, block.nonfinite);
        } else {
          const std::uint8_t* finite = block.nonfinite == 0 ? nullptr : block.finite.data();
          worker.ranks[std::size_t(m)].count_block(values.data(), finite, count);
        }
      }
      count_distances(worker, begin, count, result);
    }
  }

  static constexpr int kLanes = 8;
#if defined(FUSEBENCH_ERROR_STATS_VECTORS)
  // The eight lanes in vectors: lane l in vector l / kVectorLanes.
  static constexpr int kVectors = kLanes / kVectorLanes;
  static void store_lanes(const MetricVector (&vectors)[kVectors],
                          std::array<double, kLanes>& lanes) {
    for (int v = 0; v < kVectors; ++v) vector_store(lanes.data() + v * kVectorLanes, vectors[v]);
  }
#endif
  // An fp16 result against an fp64 reference: the fused pass rounds the reference for the
  // distances while it holds it in registers (round_to_half_bits), instead of a pass of its own.
#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__F16C__)
  static constexpr bool kRoundsReferenceInRegisters =
      std::is_same_v<Y, Half> && std::is_same_v<R, double>;
#else
  static constexpr bool kRoundsReferenceInRegisters = false;
#endif

  // A block's sum and maximum of metric m, from its eight lanes; `block` holds the metrics of the
  // block at `begin` when the maximum rises (the first index of the largest value is sought), and
  // its finite flags unless `all_finite`. `nonfinite` is the block's count of non-finite pairs
  // (the fused pass counts them itself and fills the flags only for a block that has some).
  void add_block_lanes(const BlockMetrics<Y, R>& block, bool all_finite, int m,
                       const std::array<double, kLanes>& lane_sum,
                       const std::array<double, kLanes>& lane_max, std::int64_t begin,
                       std::int64_t count, std::int64_t nonfinite, ChunkResult& result) const {
    double block_sum = 0, block_max = 0;
    for (int l = 0; l < kLanes; ++l) {
      block_sum += lane_sum[std::size_t(l)];
      block_max = std::max(block_max, lane_max[std::size_t(l)]);
    }
    result.sums[std::size_t(m)].add(block_sum);
    double& max = result.max[std::size_t(m)];
    std::int64_t& max_index = result.max_index[std::size_t(m)];
    if (max_rises(block_max, nonfinite, count, result, m)) {
      const auto& values = block.metric[std::size_t(m)];
      for (std::int64_t k = 0; k < count; ++k) {
        if ((all_finite || block.finite[std::size_t(k)]) && values[std::size_t(k)] == block_max) {
          max = block_max;
          max_index = begin + k;
          break;
        }
      }
    }
  }

  // True when the block's maximum beats the chunk's so far, or is the chunk's first finite value.
  static bool max_rises(double block_max, std::int64_t nonfinite, std::int64_t count,
                        const ChunkResult& result, int m) {
    return block_max > result.max[std::size_t(m)] ||
           (result.max_index[std::size_t(m)] < 0 && nonfinite < count);
  }

#if defined(FUSEBENCH_ERROR_STATS_VECTORS)
  // ---- the fused block: the three metrics of a vector of pairs at a time are computed in registers,
  // summed and maximised there, and stored to L1 for the windows' counting loops (BlockMetrics'
  // scalar computation and sweeps were most of the pass). The metrics are BlockMetrics', and the
  // lanes those of count_chunk's sums: the same bits, stored where BlockMetrics stores them. A
  // block with non-finite pairs is recomputed by BlockMetrics for the rare work that needs each
  // element (and the finite flags); one whose maximum rises is searched in the stored metrics.

  void count_fused_block(Worker& worker, std::int64_t begin, ChunkResult& result) {
    using Counter = WindowSelector::VectorCounter;
    std::vector<WindowSelector>& windows = worker.windows;
    for (auto& w : windows) w.reserve(kBlock);
    Counter abs_counter(windows[0]), rel_counter(windows[1]), ulp_counter(windows[2]);
    const VectorMetrics<Y, R> metrics(stats_.rel_floor);
    MetricVector sum[kMetrics][kVectors], max[kMetrics][kVectors];
    for (int m = 0; m < kMetrics; ++m) {
      for (int v = 0; v < kVectors; ++v) sum[m][v] = max[m][v] = vector_zero();
    }
    std::int64_t nonfinite = 0;
    const Y* y = y_ + begin;
    const R* ref = ref_ + begin;
    // The metrics go to the block's arrays, in L1, and are counted into the windows by one loop per
    // metric, each compiled for its windows' kinds (VectorCounter::count_stored). The arrays hold
    // what BlockMetrics::compute stores there (0 for a pair not compared): the same bits.
    BlockMetrics<Y, R>& block = *worker.block;
    double* stored[kMetrics] = {block.metric[0].data(), block.metric[1].data(),
                                block.metric[2].data()};
    // A part of the block at a time, computed then counted: the counting loops' instructions
    // follow the division's within the core's reordering window, so that they run while the
    // divider (not pipelined) works, instead of after all the block's divisions (kBlock at a time:
    // 6 to 10 % slower over the pass).
    constexpr std::int64_t kPart = 128;
    static_assert(kBlock % kPart == 0 && kPart % kLanes == 0);
    // The vectors of a lane group one after the other (each lane's values still in order): with
    // AVX2's two vectors per eight lanes, one loop's sums and maxima fit the sixteen registers.
    for (std::int64_t part = 0; part < kBlock; part += kPart) {
      for (int v = 0; v < kVectors; ++v) {
        for (std::int64_t i = part; i < part + kPart; i += kLanes) {
          const std::int64_t at = i + v * kVectorLanes;
          const auto p = metrics(y + at, ref + at);
#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__F16C__)
          if constexpr (kRoundsReferenceInRegisters) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(worker.rounded_ref.data() + at),
                             round_to_half_bits(p.ref));
          }
#endif
          nonfinite += std::popcount(unsigned(p.nonfinite));
          const MetricVector metric[kMetrics] = {p.abs, p.rel, p.ulp};
          for (int m = 0; m < kMetrics; ++m) {
            sum[m][v] = vector_add(sum[m][v], metric[m]);
            max[m][v] = vector_max(metric[m], max[m][v]);
            vector_store(stored[m] + at, metric[m]);
          }
        }
      }
      abs_counter.count_stored(stored[0] + part, kPart);
      rel_counter.count_stored(stored[1] + part, kPart);
      ulp_counter.count_stored(stored[2] + part, kPart);
    }
    abs_counter.finish();
    rel_counter.finish();
    ulp_counter.finish();
    result.compared += kBlock - nonfinite;
    if (nonfinite != 0) {
      block.compute(y, ref, kBlock, stats_.rel_floor);
      count_nonfinite(block, begin, kBlock, result);
    }
    for (int m = 0; m < kMetrics; ++m) {
      alignas(64) std::array<double, kLanes> lane_sum, lane_max;
      store_lanes(sum[m], lane_sum);
      store_lanes(max[m], lane_max);
      add_block_lanes(block, nonfinite == 0, m, lane_sum, lane_max, begin, kBlock, nonfinite,
                      result);
      windows[std::size_t(m)].finish_block(nonfinite);
    }
  }
#endif

  void count_nonfinite(const BlockMetrics<Y, R>& block, std::int64_t begin, std::int64_t count,
                       ChunkResult& result) const {
    for (std::int64_t i = 0; i < count; ++i) {
      const auto k = std::size_t(i);
      if (block.finite[k]) continue;
      const double yv = block.y_value[k], rv = block.ref_value[k];
      const bool y_nan = std::isnan(yv), ref_nan = std::isnan(rv);
      result.nan_y += y_nan;
      result.nan_ref += ref_nan;
      result.inf_y += std::isinf(yv);
      result.inf_ref += std::isinf(rv);
      const bool agree = (y_nan && ref_nan) || (std::isinf(yv) && yv == rv);
      if (!agree) {
        ++result.mismatches;
        if (result.first_mismatch_indices.size() < options_.max_reported_indices)
          result.first_mismatch_indices.push_back(begin + i);
      }
    }
  }

  // Integer ULP distances to the reference rounded to y's format.
  // `ref_rounded`: worker.rounded_ref already holds the block's reference rounded to y's format.
  void count_distances(Worker& worker, std::int64_t begin, std::int64_t count, ChunkResult& result,
                       bool ref_rounded = false) const {
    const Bits* y_bits = reinterpret_cast<const Bits*>(y_ + begin);
    const Bits* ref_bits;
    if constexpr (std::is_same_v<R, Y>) {
      ref_bits = reinterpret_cast<const Bits*>(ref_ + begin);
    } else {
      if (!ref_rounded) round_to_format<Y>(ref_ + begin, worker.rounded_ref.data(), count);
      ref_bits = worker.rounded_ref.data();
    }
    const auto summary =
        detail::block_distances<Y>(y_bits, ref_bits, worker.distances.data(), count);
    detail::block_histogram(worker.distances.data(), count, options_.histogram_bins,
                            result.histogram.data());
    result.nan_pairs += summary.nan_pairs;
    // Rescan only a block that raises the maximum (or holds the first pair without NaN).
    if (std::int64_t(summary.nan_pairs) < count &&
        (summary.max_distance > result.ulp_diff_max || result.ulp_diff_max_index < 0)) {
      for (std::int64_t i = 0; i < count; ++i) {
        if (!is_nan_bits<Y>(y_bits[i]) && !is_nan_bits<Y>(ref_bits[i]) &&
            worker.distances[std::size_t(i)] == summary.max_distance) {
          result.ulp_diff_max = summary.max_distance;
          result.ulp_diff_max_index = begin + i;
          break;
        }
      }
    }
  }

  // ---- the exact percentiles: ranks floor(h) and floor(h) + 1 of each, h = (compared - 1) p
  void percentiles() {
    const std::int64_t compared = stats_.compared;
    std::vector<std::int64_t> wanted;
    for (double p : kPercentiles) {
      const auto low = std::int64_t(std::floor(double(compared - 1) * p));
      wanted.push_back(low);
      wanted.push_back(std::min(low + 1, compared - 1));
    }
    // Order statistics per metric, from the windows where they held the ranks, else from the
    // radix selection.
    std::array<std::vector<double>, kMetrics> order;
    std::array<bool, kMetrics> radix = {true, true, true};
    if (intervals_) {
      // Metric by metric, each one's sweeps over its kept values shared among the threads (one
      // metric, the continuous rel, usually keeps almost all).
      for (int m = 0; m < kMetrics; ++m) {
        std::optional<std::vector<double>> values =
            workers_[0].windows[std::size_t(m)].values(wanted, threads_);
        radix[std::size_t(m)] = !values;
        if (values) order[std::size_t(m)] = std::move(*values);
      }
    }
    if (std::find(radix.begin(), radix.end(), true) != radix.end()) {
      if (intervals_) radix_count_pass(radix);
      radix_select(wanted, radix, order);
    }
    std::array<ErrorSummary*, kMetrics> summaries = {&stats_.abs, &stats_.rel, &stats_.ulp_error};
    for (int m = 0; m < kMetrics; ++m) {
      ErrorSummary& summary = *summaries[std::size_t(m)];
      summary.mean = mean_sum_[std::size_t(m)] / double(compared);
      for (std::size_t q = 0; q < std::size(kPercentiles); ++q) {
        const double h = double(compared - 1) * kPercentiles[q];
        const double low = order[std::size_t(m)][2 * q], high = order[std::size_t(m)][2 * q + 1];
        (q == 0 ? summary.p50 : summary.p99) = low + (h - double(wanted[2 * q])) * (high - low);
      }
    }
  }

  // A pass that fills the radix selectors' top-bits histograms of the metrics that need them,
  // when the first pass counted windows instead.
  void radix_count_pass(const std::array<bool, kMetrics>& radix) {
    for (auto& w : workers_) {
      w.ranks.clear();
      for (int m = 0; m < kMetrics; ++m) w.ranks.emplace_back(radix[std::size_t(m)] ? n_ : 0);
    }
    for_each_chunk(chunks_, threads_, [&](int w, std::int64_t c) {
      Worker& worker = workers_[std::size_t(w)];
      BlockMetrics<Y, R>& block = *worker.block;
      for (std::int64_t begin = chunk_begin(c); begin < chunk_end(c); begin += kBlock) {
        const std::int64_t count = std::min(kBlock, n_ - begin);
        block.compute(y_ + begin, ref_ + begin, count, stats_.rel_floor);
        const std::uint8_t* finite = block.nonfinite == 0 ? nullptr : block.finite.data();
        for (int m = 0; m < kMetrics; ++m) {
          if (radix[std::size_t(m)])
            worker.ranks[std::size_t(m)].count_block(block.metric[std::size_t(m)].data(), finite,
                                                     count);
        }
      }
    });
    for (int m = 0; m < kMetrics; ++m) {
      if (!radix[std::size_t(m)]) continue;
      for (std::size_t w = 1; w < workers_.size(); ++w)
        workers_[0].ranks[std::size_t(m)].merge_counts(workers_[w].ranks[std::size_t(m)]);
    }
    ++stats_.passes;
  }

  // The radix selection over the histograms of the first (or the extra) pass: replays until
  // every wanted rank is resolved.
  void radix_select(const std::vector<std::int64_t>& wanted,
                    const std::array<bool, kMetrics>& radix,
                    std::array<std::vector<double>, kMetrics>& order) {
    std::vector<RankSelector>& ranks = workers_[0].ranks;
    for (int m = 0; m < kMetrics; ++m) {
      if (radix[std::size_t(m)]) ranks[std::size_t(m)].plan(wanted);
    }
    auto any_active = [&] {
      return std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.active(); });
    };
    while (any_active()) {
      // Each worker observes into copies of the probes; the copies merge into worker 0's.
      std::vector<std::vector<RankSelector>> copies(workers_.size());
      for (std::size_t w = 1; w < workers_.size(); ++w) {
        for (const auto& r : ranks) copies[w].push_back(r.pass_copy());
      }
      for_each_chunk(chunks_, threads_, [&](int w, std::int64_t c) {
        replay_chunk(*workers_[std::size_t(w)].block, w == 0 ? ranks : copies[std::size_t(w)], c);
      });
      for (std::size_t w = 1; w < workers_.size(); ++w) {
        for (int m = 0; m < kMetrics; ++m)
          ranks[std::size_t(m)].merge_observations(copies[w][std::size_t(m)]);
      }
      for (auto& r : ranks) r.finish_pass();
      ++stats_.passes;
    }
    for (int m = 0; m < kMetrics; ++m) {
      if (!radix[std::size_t(m)]) continue;
      for (auto rank : wanted) order[std::size_t(m)].push_back(ranks[std::size_t(m)].value(rank));
    }
  }

  void replay_chunk(BlockMetrics<Y, R>& block, std::vector<RankSelector>& ranks,
                    std::int64_t c) const {
    for (std::int64_t begin = chunk_begin(c); begin < chunk_end(c); begin += kBlock) {
      const std::int64_t count = std::min(kBlock, n_ - begin);
      block.compute(y_ + begin, ref_ + begin, count, stats_.rel_floor);
      for (int m = 0; m < kMetrics; ++m) {
        RankSelector& selector = ranks[std::size_t(m)];
        if (!selector.active()) continue;
        const auto& values = block.metric[std::size_t(m)];
        for (std::int64_t i = 0; i < count; ++i) {
          if (block.finite[std::size_t(i)]) selector.observe(values[std::size_t(i)]);
        }
      }
    }
  }

  const ErrorStatsOptions& options_;
  std::int64_t n_;
  const Y* y_;
  const R* ref_;
  std::int64_t chunks_;
  int threads_ = 1;
  ErrorStats stats_;
  std::vector<Worker> workers_;
  std::array<double, kMetrics> mean_sum_{};
  std::optional<std::array<WindowSelector::Intervals, kMetrics>> intervals_;
};

template <class Y, class R>
ErrorStats error_stats_typed(const Tensor& y, const Tensor& ref, const ErrorStatsOptions& options) {
  return ErrorStatsRun<Y, R>(y, ref, options).run();
}
}  // namespace

namespace detail {
std::int64_t rank_sample_position(std::int64_t i, std::int64_t n, std::int64_t samples) {
  using Wide = unsigned __int128;
  const auto begin = std::int64_t(Wide(i) * Wide(n) / Wide(samples));
  const auto end = std::int64_t(Wide(i + 1) * Wide(n) / Wide(samples));
  // splitmix64's finaliser of i: an offset inside the stratum that does not follow a period
  std::uint64_t z = std::uint64_t(i) + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return begin + std::int64_t(z % std::uint64_t(std::max<std::int64_t>(end - begin, 1)));
}
}  // namespace detail

ErrorStats error_stats(const Tensor& y_in, const Tensor& ref_in, const ErrorStatsOptions& options) {
  check_same_shape(y_in, ref_in, "error_stats");
  if (options.histogram_bins < 1) {
    throw_input_error("error_stats: histogram_bins must be >= 1, got {}", options.histogram_bins);
  }
  const Tensor y = y_in.contiguous();
  const Tensor ref = ref_in.contiguous();
  return visit_floating(y.dtype(), "error_stats (y)", [&](auto y_tag) {
    return visit_floating(ref.dtype(), "error_stats (ref)", [&](auto ref_tag) {
      return error_stats_typed<decltype(y_tag), decltype(ref_tag)>(y, ref, options);
    });
  });
}

}  // namespace fusebench
