// Exact order statistics for error_stats (internal to the toolkit library): the radix rank
// selector, which finds any rank of a replayable stream in bounded memory, and the window
// selector, which finds ranks in one pass inside intervals that a sample predicted.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "fusebench/tensor.hpp"
#include "metrics.hpp"

namespace fusebench::error_stats_internal {

// Exact percentiles by radix selection: a histogram of the top bits of each (non-negative)
// error's fp64 pattern, whose order is the numeric order, finds the bin of each wanted rank; a
// second pass keeps only that bin's values and nth_element finishes.
constexpr int kKeyShift = 48;
constexpr std::size_t kKeyBins = std::size_t(1) << 15;

inline std::uint32_t radix_key(double nonnegative) {
  return std::uint32_t(std::bit_cast<std::uint64_t>(nonnegative) >> kKeyShift);
}

// Exact order statistics of a stream of non-negative doubles that can be replayed, in bounded
// memory. The fp64 bit pattern of a non-negative value orders like the value, so a rank can be
// found 16 bits at a time: pass 1 histograms the top 16 bits (the callers' count()), which puts
// each wanted rank in one bin. Each further pass looks only at the values in the wanted bins: a
// bin small enough is stored and finished with nth_element; a large one is histogrammed on its
// next 16 bits while its min and max are tracked, and a large bin whose min equals its max (the
// usual case for discrete errors such as integer ULP distances) is resolved without storage. At
// most four levels exist, and a level-4 bin holds one value.
class RankSelector {
  // Counts of the distinct values of a large bin, while there are few of them (discrete errors,
  // such as differences of fp16 values, have few): then one pass resolves any rank in the bin.
  class DistinctCounter {
   public:
    void add(std::uint64_t bits, std::uint64_t count = 1) {
      if (overflowed_) return;
      std::size_t slot = std::size_t((bits * 0x9E3779B97F4A7C15ULL) >> (64 - kSlotBits));
      while (true) {
        Entry& e = table_[slot];
        if (e.count != 0 && e.bits == bits) {
          e.count += count;
          return;
        }
        if (e.count == 0) {
          if (++used_ > kMaxDistinct) {
            overflowed_ = true;
            return;
          }
          e = {bits, count};
          return;
        }
        slot = (slot + 1) & (kSlots - 1);
      }
    }
    // Overflows exactly when the union has more distinct values than the table keeps, whatever
    // the order of merging.
    void merge(const DistinctCounter& other);
    // The value of rank `within` (0-based) among the counted values, if they were few enough.
    std::optional<double> rank_value(std::int64_t within) const;

   private:
    static constexpr int kSlotBits = 7;
    static constexpr std::size_t kSlots = std::size_t(1) << kSlotBits;
    static constexpr std::size_t kMaxDistinct = kSlots / 2;
    struct Entry {
      std::uint64_t bits = 0;
      std::uint64_t count = 0;
    };
    std::array<Entry, kSlots> table_{};
    std::size_t used_ = 0;
    bool overflowed_ = false;
  };

 public:
  static constexpr std::int64_t kStoreLimit = std::int64_t(1) << 18;

  // A stream of at most kStoreLimit values is stored whole in pass 1 and finished by nth_element,
  // with no histograms: their 1.3 MB per metric, allocated and zeroed for every call, cost a small
  // tensor more than its values.
  explicit RankSelector(std::int64_t stream_length);

  // Pass 1 over one block; `finite` may be null when every pair is finite. Even and odd elements
  // go to separate tables: runs of equal values (discrete errors) would otherwise chain every
  // update through store-to-load forwarding on one counter.
  void count_block(const double* values, const std::uint8_t* finite, std::int64_t count);

  void plan(const std::vector<std::int64_t>& ranks);

  bool active() const { return !probes_.empty(); }

  // ---- parallel passes: each worker fills its own selector over a part of the stream, and the
  // parts are merged before plan() or finish_pass(). Counts, minima, maxima and value sets do not
  // depend on how the stream was split, so neither do the ranks found.
  // Pass 1 (histogram path only): add another worker's top-bits histograms and ranges.
  void merge_counts(const RankSelector& other);
  // A selector with this one's probes and none of their observations, for a worker's replay.
  RankSelector pass_copy() const;
  // Add a worker's replay observations (its selector came from pass_copy()).
  void merge_observations(RankSelector& other);

  void observe(double v) {
    const std::uint64_t bits = std::bit_cast<std::uint64_t>(v);
    if (!wanted_top_[bits >> 48]) return;  // the common case: one table load
    for (auto& probe : probes_) {
      if ((bits >> (64 - 16 * probe.level)) != probe.prefix) continue;
      if (probe.store) {
        probe.values.push_back(v);
      } else {
        probe.min = std::min(probe.min, v);
        probe.max = std::max(probe.max, v);
        ++probe.histogram[(bits >> (48 - 16 * probe.level)) & 0xffffu];
        probe.distinct.add(bits);
      }
    }
  }

  // After a pass: resolve what can be, descend a level where it cannot.
  void finish_pass();

  double value(std::int64_t rank) const { return resolved_.at(rank); }

 private:
  struct Probe {
    int level = 1;             // 16-bit groups fixed by prefix
    std::uint64_t prefix = 0;  // the top 16 * level bits
    std::int64_t rank_base = 0, count = 0;
    std::vector<std::int64_t> ranks;
    bool store = true;
    std::vector<double> values;
    double min = std::numeric_limits<double>::infinity();
    double max = -std::numeric_limits<double>::infinity();
    std::vector<std::uint32_t> histogram;
    DistinctCounter distinct;
  };

  static void add_probe_to(std::vector<Probe>& probes, std::int64_t rank, int level,
                           std::uint64_t prefix, std::int64_t rank_base, std::int64_t count);
  void mark_wanted_top_bins();
  void add_probe(std::int64_t rank, int level, std::uint64_t prefix, std::int64_t rank_base,
                 std::int64_t count) {
    add_probe_to(probes_, rank, level, prefix, rank_base, count);
  }

  bool whole_;
  std::vector<double> stored_;                               // a whole stream's values
  std::array<std::vector<std::uint32_t>, 2> top_histogram_;  // or the top-bits histograms
  std::array<std::vector<double>, 2> top_range_;             // and per bin: min, max

  static std::vector<double> initial_ranges();
  std::vector<Probe> probes_;
  std::vector<std::uint8_t> wanted_top_;
  std::map<std::int64_t, double> resolved_;
};

// ---- storage for kept values, reused from call to call
// A fresh allocation of megabytes is a fresh mapping, each of whose pages faults when first
// written (about 2,400 faults a call on 2^25 pairs). The storage comes from the buffer cache behind
// every tensor (allocate_buffer, which reuses blocks of 1 MiB or more at their exact size): the
// capacities grow by doubling from the same first size in every call, so a call finds the sizes
// the previous one gave back.
class KeptBuffer {
 public:
  KeptBuffer() = default;
  KeptBuffer(KeptBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}
  KeptBuffer& operator=(KeptBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }
  KeptBuffer(const KeptBuffer&) = delete;
  KeptBuffer& operator=(const KeptBuffer&) = delete;
  ~KeptBuffer() { release(); }

  double* data() { return data_; }
  const double* data() const { return data_; }

  // Room for `needed` values, the first `used` kept.
  void reserve(std::size_t needed, std::size_t used) {
    if (needed <= capacity_) return;
    KeptBuffer bigger;
    bigger.capacity_ = std::max(needed, 2 * capacity_);
    bigger.data_ = static_cast<double*>(allocate_buffer(bigger.capacity_ * sizeof(double)));
    std::copy_n(data_, used, bigger.data_);
    *this = std::move(bigger);
  }

  void release() {
    if (data_ != nullptr) release_buffer(data_, capacity_ * sizeof(double));
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  double* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// ---- one-pass selection inside sampled windows
// A stratified sample predicts, per wanted percentile, an interval of values [lo, hi] that holds
// its two ranks (floor(h) and floor(h) + 1). The pass counts the values below lo, equal to lo and
// equal to hi, and keeps the values strictly between: a rank that lands inside the interval is
// then found exactly, by nth_element over the kept values. Ties need no storage (only counts),
// so discrete errors with huge multiplicities cost nothing. A rank outside its interval, or
// intervals that keep more values than planned, are reported as not found (the caller falls back
// to the radix selection).
class WindowSelector {
 public:
  struct Interval {
    double lo = 0, hi = 0;  // lo: a sampled value; hi = +inf: open above
    std::int64_t keep_limit = 0;
    // Half-open [lo, hi): lo is kept with the values inside, and hi is neither kept nor counted
    // (a rank there is not found). For values that the sample saw few ties of at either end (the
    // continuous errors, and the relative error of discrete ones): two comparisons instead of
    // four, and no counts at the ends. Otherwise both ends are counted, so that ties cost counts,
    // not storage.
    bool half_open = false;
    // Whether the values strictly inside are kept. Not where the sample saw none there (discrete
    // errors whose interval ends on two neighbouring values): they are only counted, and a rank
    // among them is not found.
    bool keeps = true;
    bool holds(double x) const { return half_open ? (x >= lo && x < hi) : (x > lo && x < hi); }
  };
  static constexpr int kWindows = 2;  // P50's and P99's
  using Intervals = std::array<Interval, kWindows>;

  explicit WindowSelector(const Intervals& intervals) : intervals_(intervals) {
    for (const Interval& interval : intervals) keep_limit_ += interval.keep_limit;
  }

  // One block of one metric, `nonfinite` of whose pairs are not compared. Their metric is 0,
  // which the count takes back afterwards; no window keeps a 0, as every one is bounded below by
  // a sampled value (>= 0).
  void count_block(const double* values, std::int64_t count, std::int64_t nonfinite);

  bool overflowed() const { return overflowed_; }

  // Room for one more block of `count` values (+ one vector: stores write whole vectors).
  void reserve(std::int64_t count) {
    const auto needed = std::size_t(kept_ + count + 8);
    candidates_.reserve(needed, std::size_t(kept_));
  }

  // After a block counted by count_block or by VectorCounters: takes back the `nonfinite` zeros
  // and gives up once the windows kept more than planned.
  void finish_block(std::int64_t nonfinite);

#if defined(__AVX512F__)
  // Counts stored values eight at a time (count_block's, and the fused block of ErrorStatsRun's,
  // whose metrics wait in L1 arrays). Mask compares are counted by masked adds into one register
  // per window, its counts packed 16 bits apart (a lane sees at most kBlock / 8 values before
  // finish()); kept values leave by an in-register compress and a plain store, with no branch (a
  // compress with a memory operand is microcoded, and slow, on some x86 cores; a branch on "any
  // inside" mispredicts often). A collapsed interval (lo == hi, the usual case for discrete
  // errors) needs neither the comparisons with hi nor, when both are, the compress: each pair of
  // the windows' kinds has a loop of its own, with no decision on them inside.
  // The selector must have room for the block (reserve()), and finish() must run before it is
  // used again.
  class VectorCounter {
   public:
    explicit VectorCounter(WindowSelector& selector) : selector_(selector) {
      for (int k = 0; k < kWindows; ++k) {
        const Interval& interval = selector.intervals_[std::size_t(k)];
        lo_[k] = _mm512_set1_pd(interval.lo);
        hi_[k] = _mm512_set1_pd(interval.hi);
        interior_[k] = interval.lo != interval.hi;
        half_open_[k] = interval.half_open;
        keeps_[k] = interior_[k] && interval.keeps;
        counts_[k] = _mm512_setzero_si512();
      }
      out_ = selector.candidates_.data() + selector.kept_;
    }

    // Counts `count` stored values (a multiple of 8) in a loop compiled for the two windows'
    // kinds: what each window does is decided once a call, not at every vector.
    void count_stored(const double* values, std::int64_t count) {
      static const auto table = []<int... Index>(std::integer_sequence<int, Index...>) {
        return std::array<Loop, sizeof...(Index)>{&loop<Index / kKinds, Index % kKinds>...};
      }
      (std::make_integer_sequence<int, kKinds * kKinds>());
      table[std::size_t(kind(0) * kKinds + kind(1))](*this, values, count);
    }

    void finish() {
      const __m512i field = _mm512_set1_epi64(kAtLo - 1);
      for (int k = 0; k < kWindows; ++k) {
        selector_.below_[k] += _mm512_reduce_add_epi64(_mm512_and_si512(counts_[k], field));
        selector_.at_lo_[k] += _mm512_reduce_add_epi64(
            _mm512_and_si512(_mm512_srli_epi64(counts_[k], kFieldBits), field));
        selector_.at_hi_[k] += _mm512_reduce_add_epi64(
            _mm512_and_si512(_mm512_srli_epi64(counts_[k], 2 * kFieldBits), field));
        selector_.inside_count_[k] +=
            _mm512_reduce_add_epi64(_mm512_srli_epi64(counts_[k], 3 * kFieldBits));
        counts_[k] = _mm512_setzero_si512();
      }
      selector_.kept_ += kept_;
      out_ += kept_;
      kept_ = 0;
    }

   private:
    // A window's kind, which fixes what count() does for it: half-open (count below, keep inside),
    // collapsed (lo == hi: count below and at lo), interior keeping or counting its inside values.
    enum Kind { kHalfOpen, kCollapsed, kKeeps, kCounts, kKinds };
    int kind(int k) const {
      if (half_open_[k]) return kHalfOpen;
      if (!interior_[k]) return kCollapsed;
      return keeps_[k] ? kKeeps : kCounts;
    }

    template <int Kind0, int Kind1>
    static void loop(VectorCounter& counter, const double* values, std::int64_t count) {
      constexpr int kinds[kWindows] = {Kind0, Kind1};
      constexpr bool any_keeps =
          Kind0 == kHalfOpen || Kind0 == kKeeps || Kind1 == kHalfOpen || Kind1 == kKeeps;
      __m512i counts[kWindows] = {counter.counts_[0], counter.counts_[1]};
      double* out = counter.out_;
      std::int64_t kept = counter.kept_;
      for (std::int64_t i = 0; i < count; i += 8) {
        const __m512d x = _mm512_loadu_pd(values + i);
        __mmask8 inside = 0;
        for (int k = 0; k < kWindows; ++k) {
          const __m512d lo = counter.lo_[k], hi = counter.hi_[k];
          const __mmask8 lt_lo = _mm512_cmp_pd_mask(x, lo, _CMP_LT_OQ);
          counts[k] = _mm512_mask_add_epi64(counts[k], lt_lo, counts[k], _mm512_set1_epi64(kBelow));
          if (kinds[k] == kHalfOpen) {
            const __mmask8 lt_hi = _mm512_cmp_pd_mask(x, hi, _CMP_LT_OQ);
            inside = __mmask8(inside | (lt_hi & ~lt_lo));
            continue;
          }
          const __mmask8 eq_lo = _mm512_cmp_pd_mask(x, lo, _CMP_EQ_OQ);
          counts[k] = _mm512_mask_add_epi64(counts[k], eq_lo, counts[k], _mm512_set1_epi64(kAtLo));
          if (kinds[k] == kCollapsed) continue;
          const __mmask8 lt_hi = _mm512_cmp_pd_mask(x, hi, _CMP_LT_OQ);
          const __mmask8 eq_hi = _mm512_cmp_pd_mask(x, hi, _CMP_EQ_OQ);
          counts[k] = _mm512_mask_add_epi64(counts[k], eq_hi, counts[k], _mm512_set1_epi64(kAtHi));
          const __mmask8 in = lt_hi & ~(lt_lo | eq_lo);
          if (kinds[k] == kKeeps) {
            inside = __mmask8(inside | in);
          } else {
            counts[k] = _mm512_mask_add_epi64(counts[k], in, counts[k], _mm512_set1_epi64(kInside));
          }
        }
        if constexpr (any_keeps) {
          _mm512_storeu_pd(out + kept, _mm512_maskz_compress_pd(inside, x));
          kept += std::popcount(unsigned(inside));
        }
      }
      counter.counts_[0] = counts[0];
      counter.counts_[1] = counts[1];
      counter.kept_ = kept;
    }

    using Loop = void (*)(VectorCounter&, const double*, std::int64_t);
    static constexpr int kFieldBits = 16;
    static_assert(kBlock / 8 < (std::int64_t(1) << kFieldBits));
    static constexpr std::int64_t kBelow = 1, kAtLo = std::int64_t(1) << kFieldBits,
                                  kAtHi = std::int64_t(1) << (2 * kFieldBits),
                                  kInside = std::int64_t(1) << (3 * kFieldBits);
    WindowSelector& selector_;
    __m512d lo_[kWindows], hi_[kWindows];
    __m512i counts_[kWindows];
    bool interior_[kWindows], half_open_[kWindows], keeps_[kWindows];
    double* out_;
    std::int64_t kept_ = 0;
  };
#elif defined(__AVX2__) && defined(__F16C__)
  // The same counting four values at a time, for processors without AVX-512: a comparison's mask
  // (all ones, -1) is subtracted from a count register of its own per window and kind (one more
  // where it holds), and kept values move to the front of the vector by a permutation that their
  // mask picks, then the whole vector is stored (the next store overwrites what lies past them).
  // As there, each pair of the windows' kinds has a loop of its own.
  class VectorCounter {
   public:
    explicit VectorCounter(WindowSelector& selector) : selector_(selector) {
      for (int k = 0; k < kWindows; ++k) {
        const Interval& interval = selector.intervals_[std::size_t(k)];
        lo_[k] = _mm256_set1_pd(interval.lo);
        hi_[k] = _mm256_set1_pd(interval.hi);
        kinds_[k] = interval.half_open           ? kHalfOpen
                    : interval.lo == interval.hi ? kCollapsed
                    : interval.keeps             ? kKeeps
                                                 : kCounts;
        for (auto& c : counts_[k]) c = _mm256_setzero_si256();
      }
      out_ = selector.candidates_.data() + selector.kept_;
    }

    // Counts `count` stored values (a multiple of 4).
    void count_stored(const double* values, std::int64_t count) {
      static const auto table = []<int... Index>(std::integer_sequence<int, Index...>) {
        return std::array<Loop, sizeof...(Index)>{&loop<Index / kKinds, Index % kKinds>...};
      }
      (std::make_integer_sequence<int, kKinds * kKinds>());
      table[std::size_t(kinds_[0] * kKinds + kinds_[1])](*this, values, count);
    }

    void finish() {
      auto total = [](__m256i v) {
        alignas(32) std::array<std::int64_t, 4> lanes;
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes.data()), v);
        return lanes[0] + lanes[1] + lanes[2] + lanes[3];
      };
      for (int k = 0; k < kWindows; ++k) {
        selector_.below_[k] += total(counts_[k][kBelow]);
        selector_.at_lo_[k] += total(counts_[k][kAtLo]);
        selector_.at_hi_[k] += total(counts_[k][kAtHi]);
        selector_.inside_count_[k] += total(counts_[k][kInside]);
        for (auto& c : counts_[k]) c = _mm256_setzero_si256();
      }
      selector_.kept_ += kept_;
      out_ += kept_;
      kept_ = 0;
    }

   private:
    enum Kind { kHalfOpen, kCollapsed, kKeeps, kCounts, kKinds };
    enum Count { kBelow, kAtLo, kAtHi, kInside, kCountKinds };

    template <int Kind0, int Kind1>
    static void loop(VectorCounter& counter, const double* values, std::int64_t count) {
      constexpr int kinds[kWindows] = {Kind0, Kind1};
      constexpr bool any_keeps =
          Kind0 == kHalfOpen || Kind0 == kKeeps || Kind1 == kHalfOpen || Kind1 == kKeeps;
      __m256i counts[kWindows][kCountKinds];
      for (int k = 0; k < kWindows; ++k) {
        for (int c = 0; c < kCountKinds; ++c) counts[k][c] = counter.counts_[k][c];
      }
      double* out = counter.out_;
      std::int64_t kept = counter.kept_;
      auto add = [](__m256i& to, __m256d mask) {
        to = _mm256_sub_epi64(to, _mm256_castpd_si256(mask));
      };
      for (std::int64_t i = 0; i < count; i += 4) {
        const __m256d x = _mm256_loadu_pd(values + i);
        __m256d inside = _mm256_setzero_pd();
        for (int k = 0; k < kWindows; ++k) {
          const __m256d lo = counter.lo_[k], hi = counter.hi_[k];
          const __m256d lt_lo = _mm256_cmp_pd(x, lo, _CMP_LT_OQ);
          add(counts[k][kBelow], lt_lo);
          if (kinds[k] == kHalfOpen) {
            const __m256d lt_hi = _mm256_cmp_pd(x, hi, _CMP_LT_OQ);
            inside = _mm256_or_pd(inside, _mm256_andnot_pd(lt_lo, lt_hi));
            continue;
          }
          const __m256d eq_lo = _mm256_cmp_pd(x, lo, _CMP_EQ_OQ);
          add(counts[k][kAtLo], eq_lo);
          if (kinds[k] == kCollapsed) continue;
          const __m256d lt_hi = _mm256_cmp_pd(x, hi, _CMP_LT_OQ);
          add(counts[k][kAtHi], _mm256_cmp_pd(x, hi, _CMP_EQ_OQ));
          const __m256d in = _mm256_andnot_pd(_mm256_or_pd(lt_lo, eq_lo), lt_hi);
          if (kinds[k] == kKeeps) {
            inside = _mm256_or_pd(inside, in);
          } else {
            add(counts[k][kInside], in);
          }
        }
        if constexpr (any_keeps) {
          const int mask = _mm256_movemask_pd(inside);
          const __m256i front = _mm256_load_si256(
              reinterpret_cast<const __m256i*>(kCompressToFront[std::size_t(mask)].data()));
          _mm256_storeu_pd(out + kept, _mm256_castsi256_pd(_mm256_permutevar8x32_epi32(
                                           _mm256_castpd_si256(x), front)));
          kept += std::popcount(unsigned(mask));
        }
      }
      for (int k = 0; k < kWindows; ++k) {
        for (int c = 0; c < kCountKinds; ++c) counter.counts_[k][c] = counts[k][c];
      }
      counter.kept_ = kept;
    }

    // Per mask of four lanes: the 32-bit lanes that bring the masked doubles to the front.
    alignas(32) static constexpr auto kCompressToFront = [] {
      std::array<std::array<std::int32_t, 8>, 16> table{};
      for (int mask = 0; mask < 16; ++mask) {
        int slot = 0;
        for (int lane = 0; lane < 4; ++lane) {
          if ((mask >> lane) & 1) {
            table[std::size_t(mask)][std::size_t(2 * slot)] = 2 * lane;
            table[std::size_t(mask)][std::size_t(2 * slot + 1)] = 2 * lane + 1;
            ++slot;
          }
        }
      }
      return table;
    }();

    using Loop = void (*)(VectorCounter&, const double*, std::int64_t);
    WindowSelector& selector_;
    __m256d lo_[kWindows], hi_[kWindows];
    __m256i counts_[kWindows][kCountKinds];
    int kinds_[kWindows];
    double* out_;
    std::int64_t kept_ = 0;
  };
#endif

  // Takes another worker's counts and kept values (moved, not copied: the sweeps read every part).
  void merge(WindowSelector& other);

  // The values of `ranks` (0-based, among the compared values), if the windows hold them all.
  // A rank inside a window is found among the kept values in two sweeps over them, for all ranks
  // together: one histograms each window's kept values by their fp64 patterns (ordered like the
  // non-negative values) over the window's range, which puts each rank in one bucket or two; the
  // other picks those buckets' few values, and nth_element finishes among them.
  std::optional<std::vector<double>> values(const std::vector<std::int64_t>& ranks, int threads);

 private:
  // Counts a run of values into each window: below lo, at lo and at hi (where the interval is not
  // half-open), strictly inside (where it does not keep them); keeps those inside a keeping window.
  void count_values(const double* values, std::int64_t count);

  Intervals intervals_;
  std::int64_t keep_limit_ = 0;
  // at_hi: 0 where lo == hi
  std::int64_t below_[kWindows] = {}, at_lo_[kWindows] = {}, at_hi_[kWindows] = {};
  std::int64_t inside_count_[kWindows] = {};  // of the windows that do not keep their values
  KeptBuffer candidates_;  // the first kept_ entries: values inside either window
  std::int64_t kept_ = 0;
  // other workers' candidates, and how many
  std::vector<std::pair<KeptBuffer, std::int64_t>> merged_;
  std::int64_t merged_kept_ = 0;
  bool overflowed_ = false;
};

}  // namespace fusebench::error_stats_internal
