#include "fusebench/error_stats.hpp"

#include "ulp_kernels.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_pd placeholder of
// _mm512_max_pd) wherever they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace fusebench {

double percentile(std::vector<double>& values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double h = double(values.size() - 1) * p;
  const auto lo = std::size_t(std::floor(h));
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(lo), values.end());
  const double low_value = values[lo];
  if (lo + 1 >= values.size()) return low_value;
  const double high_value = *std::min_element(values.begin() + std::ptrdiff_t(lo) + 1, values.end());
  return low_value + (h - double(lo)) * (high_value - low_value);
}

namespace {
constexpr std::int64_t kBlock = 2048;
constexpr int kMetrics = 3;  // abs, rel, ulp
// Exact percentiles by radix selection: a histogram of the top bits of each (non-negative)
// error's fp64 pattern, whose order is the numeric order, finds the bin of each wanted rank; a
// second pass keeps only that bin's values and nth_element finishes.
constexpr int kKeyShift = 48;
constexpr std::size_t kKeyBins = std::size_t(1) << 15;

std::uint32_t radix_key(double nonnegative) {
  return std::uint32_t(std::bit_cast<std::uint64_t>(nonnegative) >> kKeyShift);
}


template <class Y>
typename FloatFormat<Y>::Bits to_format_bits(double value) {
  if constexpr (std::is_same_v<Y, double>) {
    return std::bit_cast<std::uint64_t>(value);
  } else if constexpr (std::is_same_v<Y, float>) {
    return std::bit_cast<std::uint32_t>(float(value));
  } else {
    return round_to_format_bits<Y>(value);
  }
}

bool finite_bits(double v) {
  return (std::bit_cast<std::uint64_t>(v) & 0x7ff0'0000'0000'0000ULL) != 0x7ff0'0000'0000'0000ULL;
}

// ---- the metrics of a pair: abs = |y - ref|, rel = abs / max(|ref|, rel_floor), ulp = abs in
// spacings of y's format at ref: abs * 2^(p - 1 - e), e = floor(log2 |ref|) clamped to the
// format's exponent range, rounded once (ldexp; scalef in vectors). A pair with a NaN or an
// infinity gets 0 for all three and is not compared.
template <class Y>
struct PairMetric {
  using F = FormatTraits<Y>;
  static double ulp(double diff, double ref) {
    std::int64_t exponent = std::int64_t((std::bit_cast<std::uint64_t>(ref) >> 52) & 0x7ff) - 1023;
    exponent = std::clamp<std::int64_t>(exponent, F::min_normal_exponent, F::max_exponent);
    return std::ldexp(diff, int(F::mantissa_bits - exponent));
  }
};

#if defined(__AVX512F__)
// The same metrics for eight pairs at a time, operation for operation: the same bits.
template <class Y, class R>
class VectorMetrics {
  using F = FormatTraits<Y>;

 public:
  struct Pairs {
    __m512d y, ref, abs, rel, ulp;
    __mmask8 nonfinite;
  };

  explicit VectorMetrics(double rel_floor) : rel_floor_(_mm512_set1_pd(rel_floor)) {}

  Pairs operator()(const Y* y, const R* ref) const {
    Pairs p;
    p.y = widen(y);
    p.ref = widen(ref);
    // fpclass 0x99: NaN (quiet, signalling) or +-inf
    p.nonfinite = __mmask8(_mm512_fpclass_pd_mask(p.y, 0x99) | _mm512_fpclass_pd_mask(p.ref, 0x99));
    const __m512d magnitude = _mm512_and_pd(p.ref, magnitude_mask_);
    p.abs = _mm512_maskz_and_pd(__mmask8(~p.nonfinite), _mm512_sub_pd(p.y, p.ref), magnitude_mask_);
    p.rel = _mm512_div_pd(p.abs, _mm512_max_pd(magnitude, rel_floor_));  // max: magnitude > floor ? magnitude : floor
    // getexp gives floor(log2 |ref|) (-inf for 0, NaN for NaN); the clamp is the raw exponent
    // field's (max and min return their second operand where the first is NaN)
    const __m512d exponent = _mm512_min_pd(_mm512_max_pd(_mm512_getexp_pd(p.ref), min_exponent_), max_exponent_);
    p.ulp = _mm512_scalef_pd(p.abs, _mm512_sub_pd(mantissa_bits_, exponent));
    return p;
  }

 private:
  template <class T>
  static __m512d widen(const T* p) {
    if constexpr (std::is_same_v<T, double>) {
      return _mm512_loadu_pd(p);
    } else if constexpr (std::is_same_v<T, float>) {
      return _mm512_cvtps_pd(_mm256_loadu_ps(p));
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
    } else {
      static_assert(std::is_same_v<T, Half>);
      return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    }
  }

  __m512d rel_floor_;
  __m512d magnitude_mask_ = _mm512_castsi512_pd(_mm512_set1_epi64(0x7fff'ffff'ffff'ffffLL));
  __m512d min_exponent_ = _mm512_set1_pd(F::min_normal_exponent), max_exponent_ = _mm512_set1_pd(F::max_exponent);
  __m512d mantissa_bits_ = _mm512_set1_pd(F::mantissa_bits);
};
#endif

// The three metrics of one block, stored; non-finite pairs get 0 and finite[i] = 0.
template <class Y, class R>
struct BlockMetrics {
  std::array<double, kBlock> y_value, ref_value;
  std::array<std::array<double, kBlock>, kMetrics> metric;
  std::array<std::uint8_t, kBlock> finite;
  std::int64_t size = 0;
  std::int64_t nonfinite = 0;

  void compute(const Y* y, const R* ref, std::int64_t count, double rel_floor) {
    size = count;
    nonfinite = 0;
    std::int64_t i = 0;
#if defined(__AVX512F__)
    const VectorMetrics<Y, R> metrics(rel_floor);
    for (; i + 8 <= count; i += 8) {
      const auto p = metrics(y + i, ref + i);
      _mm512_storeu_pd(&y_value[std::size_t(i)], p.y);
      _mm512_storeu_pd(&ref_value[std::size_t(i)], p.ref);
      _mm512_storeu_pd(&metric[0][std::size_t(i)], p.abs);
      _mm512_storeu_pd(&metric[1][std::size_t(i)], p.rel);
      _mm512_storeu_pd(&metric[2][std::size_t(i)], p.ulp);
      for (int l = 0; l < 8; ++l) finite[std::size_t(i + l)] = ((p.nonfinite >> l) & 1) == 0;
      nonfinite += std::popcount(unsigned(p.nonfinite));
    }
#endif
    for (; i < count; ++i) {
      const auto k = std::size_t(i);
      const double yv = to_double(y[i]), rv = to_double(ref[i]);
      const bool ok = finite_bits(yv) && finite_bits(rv);
      const double diff = ok ? std::fabs(yv - rv) : 0.0;
      const double magnitude = std::fabs(rv);
      y_value[k] = yv;
      ref_value[k] = rv;
      finite[k] = ok;
      nonfinite += !ok;
      metric[0][k] = diff;
      metric[1][k] = diff / (magnitude > rel_floor ? magnitude : rel_floor);
      metric[2][k] = PairMetric<Y>::ulp(diff, rv);
    }
  }
};

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
    void merge(const DistinctCounter& other) {
      if (other.overflowed_) overflowed_ = true;
      for (const auto& e : other.table_) {
        if (e.count != 0) add(e.bits, e.count);
      }
    }
    // The value of rank `within` (0-based) among the counted values, if they were few enough.
    std::optional<double> rank_value(std::int64_t within) const {
      if (overflowed_ || used_ == 0) return std::nullopt;
      std::vector<Entry> entries;
      for (const auto& e : table_) {
        if (e.count != 0) entries.push_back(e);
      }
      std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.bits < b.bits; });
      std::int64_t before = 0;
      for (const auto& e : entries) {
        before += std::int64_t(e.count);
        if (within < before) return std::bit_cast<double>(e.bits);
      }
      return std::nullopt;
    }

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
  explicit RankSelector(std::int64_t stream_length) : whole_(stream_length <= kStoreLimit) {
    if (whole_) {
      stored_.reserve(std::size_t(stream_length));
    } else {
      top_histogram_ = {std::vector<std::uint32_t>(kKeyBins, 0), std::vector<std::uint32_t>(kKeyBins, 0)};
      top_range_ = {initial_ranges(), initial_ranges()};
    }
  }

  // Pass 1 over one block; `finite` may be null when every pair is finite. Even and odd elements
  // go to separate tables: runs of equal values (discrete errors) would otherwise chain every
  // update through store-to-load forwarding on one counter.
  void count_block(const double* values, const std::uint8_t* finite, std::int64_t count) {
    if (whole_) {
      for (std::int64_t i = 0; i < count; ++i) {
        if (finite == nullptr || finite[i]) stored_.push_back(values[i]);
      }
      return;
    }
    for (std::int64_t i = 0; i < count; ++i) {
      if (finite != nullptr && !finite[i]) continue;
      const double v = values[i];
      const std::size_t table = std::size_t(i & 1);
      const std::uint32_t key = radix_key(v);
      ++top_histogram_[table][key];
      double* range = &top_range_[table][2 * std::size_t(key)];  // min and max share a cache line
      range[0] = std::min(range[0], v);
      range[1] = std::max(range[1], v);
    }
  }

  void plan(const std::vector<std::int64_t>& ranks) {
    if (whole_) {
      for (auto rank : ranks) {
        std::nth_element(stored_.begin(), stored_.begin() + std::ptrdiff_t(rank), stored_.end());
        resolved_[rank] = stored_[std::size_t(rank)];
      }
      stored_ = {};
      return;
    }
    for (std::size_t key = 0; key < kKeyBins; ++key) {
      top_histogram_[0][key] += top_histogram_[1][key];
      top_range_[0][2 * key] = std::min(top_range_[0][2 * key], top_range_[1][2 * key]);
      top_range_[0][2 * key + 1] = std::max(top_range_[0][2 * key + 1], top_range_[1][2 * key + 1]);
    }
    auto& top_histogram = top_histogram_[0];
    auto& top_range = top_range_[0];
    for (auto rank : ranks) {
      std::int64_t before = 0;
      std::uint64_t bin = 0;
      while (rank >= before + std::int64_t(top_histogram[bin])) before += top_histogram[bin++];
      if (top_range[2 * bin] == top_range[2 * bin + 1]) {
        resolved_[rank] = top_range[2 * bin];  // one distinct value in the bin: no further pass
      } else {
        add_probe(rank, 1, bin, before, top_histogram[bin]);
      }
    }
    top_histogram_ = {};
    top_range_ = {};
    mark_wanted_top_bins();
  }

  bool active() const { return !probes_.empty(); }

  // ---- parallel passes: each worker fills its own selector over a part of the stream, and the
  // parts are merged before plan() or finish_pass(). Counts, minima, maxima and value sets do not
  // depend on how the stream was split, so neither do the ranks found.
  // Pass 1 (histogram path only): add another worker's top-bits histograms and ranges.
  void merge_counts(const RankSelector& other) {
    for (std::size_t table = 0; table < 2; ++table) {
      for (std::size_t key = 0; key < kKeyBins; ++key) {
        top_histogram_[table][key] += other.top_histogram_[table][key];
        top_range_[table][2 * key] = std::min(top_range_[table][2 * key], other.top_range_[table][2 * key]);
        top_range_[table][2 * key + 1] = std::max(top_range_[table][2 * key + 1], other.top_range_[table][2 * key + 1]);
      }
    }
  }
  // A selector with this one's probes and none of their observations, for a worker's replay.
  RankSelector pass_copy() const {
    RankSelector copy(0);
    copy.whole_ = false;
    copy.wanted_top_ = wanted_top_;
    for (const auto& probe : probes_) {
      Probe empty;
      empty.level = probe.level;
      empty.prefix = probe.prefix;
      empty.rank_base = probe.rank_base;
      empty.count = probe.count;
      empty.ranks = probe.ranks;
      empty.store = probe.store;
      if (!probe.store) empty.histogram.assign(probe.histogram.size(), 0);
      copy.probes_.push_back(std::move(empty));
    }
    return copy;
  }
  // Add a worker's replay observations (its selector came from pass_copy()).
  void merge_observations(RankSelector& other) {
    for (std::size_t i = 0; i < probes_.size(); ++i) {
      Probe& mine = probes_[i];
      Probe& theirs = other.probes_[i];
      if (mine.store) {
        mine.values.insert(mine.values.end(), theirs.values.begin(), theirs.values.end());
        theirs.values = {};
      } else {
        mine.min = std::min(mine.min, theirs.min);
        mine.max = std::max(mine.max, theirs.max);
        for (std::size_t k = 0; k < mine.histogram.size(); ++k) mine.histogram[k] += theirs.histogram[k];
        mine.distinct.merge(theirs.distinct);
      }
    }
  }

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
  void finish_pass() {
    std::vector<Probe> next;
    for (auto& probe : probes_) {
      for (auto rank : probe.ranks) {
        if (probe.store) {
          const auto within = std::ptrdiff_t(rank - probe.rank_base);
          std::nth_element(probe.values.begin(), probe.values.begin() + within, probe.values.end());
          resolved_[rank] = probe.values[std::size_t(within)];
        } else if (probe.min == probe.max) {
          resolved_[rank] = probe.min;
        } else if (auto value = probe.distinct.rank_value(rank - probe.rank_base)) {
          resolved_[rank] = *value;
        } else {
          std::int64_t before = probe.rank_base;
          std::uint64_t sub = 0;
          while (rank >= before + std::int64_t(probe.histogram[sub])) before += probe.histogram[sub++];
          add_probe_to(next, rank, probe.level + 1, (probe.prefix << 16) | sub, before, probe.histogram[sub]);
        }
      }
    }
    probes_ = std::move(next);
    mark_wanted_top_bins();
  }

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

  static void add_probe_to(std::vector<Probe>& probes, std::int64_t rank, int level, std::uint64_t prefix,
                           std::int64_t rank_base, std::int64_t count) {
    for (auto& probe : probes) {
      if (probe.level == level && probe.prefix == prefix) {
        probe.ranks.push_back(rank);
        return;
      }
    }
    Probe probe;
    probe.level = level;
    probe.prefix = prefix;
    probe.rank_base = rank_base;
    probe.count = count;
    probe.ranks = {rank};
    probe.store = count <= kStoreLimit || level == 4;
    if (probe.store) {
      probe.values.reserve(std::size_t(level == 4 ? 1 : count));
    } else {
      probe.histogram.assign(std::size_t(1) << 16, 0);
    }
    probes.push_back(std::move(probe));
  }
  void mark_wanted_top_bins() {
    wanted_top_.assign(kKeyBins, 0);
    for (const auto& probe : probes_) wanted_top_[probe.prefix >> (16 * (probe.level - 1))] = 1;
  }
  void add_probe(std::int64_t rank, int level, std::uint64_t prefix, std::int64_t rank_base, std::int64_t count) {
    add_probe_to(probes_, rank, level, prefix, rank_base, count);
  }

  bool whole_;
  std::vector<double> stored_;                                 // a whole stream's values
  std::array<std::vector<std::uint32_t>, 2> top_histogram_;  // or the top-bits histograms
  std::array<std::vector<double>, 2> top_range_;             // and per bin: min, max

  static std::vector<double> initial_ranges() {
    std::vector<double> ranges(2 * kKeyBins);
    for (std::size_t i = 0; i < kKeyBins; ++i) {
      ranges[2 * i] = std::numeric_limits<double>::infinity();
      ranges[2 * i + 1] = -std::numeric_limits<double>::infinity();
    }
    return ranges;
  }
  std::vector<Probe> probes_;
  std::vector<std::uint8_t> wanted_top_;
  std::map<std::int64_t, double> resolved_;
};

// Runs work(worker, chunk) for every chunk on `threads` workers (the caller is worker 0), each
// chunk exactly once; rethrows the first exception.
template <class Work>
void for_each_chunk(std::int64_t chunks, int threads, Work&& work) {
  std::atomic<std::int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&](int w) {
    try {
      for (std::int64_t c = next++; c < chunks; c = next++) work(w, c);
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = chunks;
    }
  };
  std::vector<std::jthread> helpers;
  for (int w = 1; w < threads; ++w) helpers.emplace_back(worker, w);
  worker(0);
  helpers.clear();  // joins
  if (failure) std::rethrow_exception(failure);
}

// ---- storage for kept values, reused from call to call
// A fresh allocation of megabytes is a fresh mapping, each of whose pages faults when first
// written: about 2,400 faults, 1-2 ms, a call on 2^25 pairs. Buffers given up go to a small pool
// (the largest few, at most kPoolBytes together) that the next call takes them from.
class KeptBuffer {
 public:
  KeptBuffer() = default;
  KeptBuffer(KeptBuffer&& other) noexcept : data_(std::move(other.data_)), capacity_(std::exchange(other.capacity_, 0)) {}
  KeptBuffer& operator=(KeptBuffer&& other) noexcept {
    release();
    data_ = std::move(other.data_);
    capacity_ = std::exchange(other.capacity_, 0);
    return *this;
  }
  ~KeptBuffer() { release(); }

  double* data() { return data_.get(); }
  const double* data() const { return data_.get(); }

  // Room for `needed` values, the first `used` kept.
  void reserve(std::size_t needed, std::size_t used) {
    if (needed <= capacity_) return;
    KeptBuffer bigger = from_pool(std::max(needed, 2 * capacity_));
    std::copy_n(data_.get(), used, bigger.data_.get());
    *this = std::move(bigger);
  }

  void release() {
    if (!data_) return;
    std::lock_guard lock(pool_mutex());
    auto& pool = this->pool();
    pool.emplace_back(std::move(data_), std::exchange(capacity_, 0));
    std::sort(pool.begin(), pool.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::size_t bytes = 0, keep = 0;
    while (keep < pool.size() && keep < kPooled && bytes + pool[keep].second * sizeof(double) <= kPoolBytes) bytes += pool[keep++].second * sizeof(double);
    pool.resize(keep);
  }

 private:
  static constexpr std::size_t kPooled = 8;
  static constexpr std::size_t kPoolBytes = std::size_t(256) << 20;
  using Pool = std::vector<std::pair<std::unique_ptr<double[]>, std::size_t>>;
  static Pool& pool() {
    static Pool buffers;
    return buffers;
  }
  static std::mutex& pool_mutex() {
    static std::mutex mutex;
    return mutex;
  }
  // The smallest pooled buffer that holds `capacity` values, else a new one.
  static KeptBuffer from_pool(std::size_t capacity) {
    KeptBuffer buffer;
    {
      std::lock_guard lock(pool_mutex());
      auto& buffers = pool();
      auto best = buffers.end();
      for (auto it = buffers.begin(); it != buffers.end(); ++it) {
        if (it->second >= capacity && (best == buffers.end() || it->second < best->second)) best = it;
      }
      if (best != buffers.end()) {
        buffer.data_ = std::move(best->first);
        buffer.capacity_ = best->second;
        buffers.erase(best);
        return buffer;
      }
    }
    buffer.data_ = std::make_unique_for_overwrite<double[]>(capacity);
    buffer.capacity_ = capacity;
    return buffer;
  }

  std::unique_ptr<double[]> data_;
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
    // (a rank there is not found). For values that the sample saw no ties of at either end (the
    // continuous errors): two comparisons instead of four, and no counts at the ends. Otherwise
    // both ends are counted, so that ties cost counts, not storage.
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
  void count_block(const double* values, std::int64_t count, std::int64_t nonfinite) {
    if (overflowed_) return;  // kept too much to answer anything: stop counting
    reserve(count);
    std::int64_t i = 0;
#if defined(__AVX512F__)
    VectorCounter counter(*this);
    for (; i + 8 <= count; i += 8) counter.count(_mm512_loadu_pd(values + i));
    counter.finish();
#endif
    for (; i < count; ++i) {
      if (count_one(values[i])) candidates_.data()[kept_++] = values[i];
    }
    finish_block(nonfinite);
  }

  bool overflowed() const { return overflowed_; }

  // Room for one more block of `count` values (+ one vector: stores write whole vectors).
  void reserve(std::int64_t count) {
    const auto needed = std::size_t(kept_ + count + 8);
    candidates_.reserve(needed, std::size_t(kept_));
  }

  // After a block counted by count_block or by VectorCounters: takes back the `nonfinite` zeros
  // and gives up once the windows kept more than planned.
  void finish_block(std::int64_t nonfinite) {
    for (int k = 0; k < kWindows; ++k) {
      const Interval& w = intervals_[std::size_t(k)];
      below_[k] -= nonfinite * (0 < w.lo);
      at_lo_[k] -= nonfinite * (0 == w.lo);
      at_hi_[k] -= nonfinite * (0 == w.hi && w.hi != w.lo);
    }
    if (kept_ > keep_limit_) {
      overflowed_ = true;
      candidates_.release();
      kept_ = 0;
    }
  }

#if defined(__AVX512F__)
  // Counts values eight at a time, for a caller that has them in a register (count_block, or the
  // fused block of ErrorStatsRun, which never stores its metrics). Mask compares are counted by
  // masked adds into one register per window, its three counts packed 21 bits apart (a lane sees
  // at most kBlock / 8 values before finish()); kept values leave by an in-register compress and
  // a plain store, with no branch (a compress with a memory operand is microcoded, and slow, on
  // some x86 cores; a branch on "any inside" mispredicts often). A collapsed interval (lo == hi,
  // the usual case for discrete errors) needs neither the comparisons with hi nor, when both
  // are, the compress: those branches go the same way for a whole call.
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
      any_keeps_ = keeps_[0] || keeps_[1];
      out_ = selector.candidates_.data() + selector.kept_;
    }

    void count(__m512d x) {
      __mmask8 inside = 0;
      for (int k = 0; k < kWindows; ++k) {
        const __mmask8 lt_lo = _mm512_cmp_pd_mask(x, lo_[k], _CMP_LT_OQ);
        counts_[k] = _mm512_mask_add_epi64(counts_[k], lt_lo, counts_[k], _mm512_set1_epi64(kBelow));
        if (half_open_[k]) {
          const __mmask8 lt_hi = _mm512_cmp_pd_mask(x, hi_[k], _CMP_LT_OQ);
          inside = __mmask8(inside | (lt_hi & ~lt_lo));
          continue;
        }
        const __mmask8 eq_lo = _mm512_cmp_pd_mask(x, lo_[k], _CMP_EQ_OQ);
        counts_[k] = _mm512_mask_add_epi64(counts_[k], eq_lo, counts_[k], _mm512_set1_epi64(kAtLo));
        if (interior_[k]) {
          const __mmask8 lt_hi = _mm512_cmp_pd_mask(x, hi_[k], _CMP_LT_OQ);
          const __mmask8 eq_hi = _mm512_cmp_pd_mask(x, hi_[k], _CMP_EQ_OQ);
          counts_[k] = _mm512_mask_add_epi64(counts_[k], eq_hi, counts_[k], _mm512_set1_epi64(kAtHi));
          const __mmask8 in = lt_hi & ~(lt_lo | eq_lo);
          if (keeps_[k]) {
            inside = __mmask8(inside | in);
          } else {
            counts_[k] = _mm512_mask_add_epi64(counts_[k], in, counts_[k], _mm512_set1_epi64(kInside));
          }
        }
      }
      if (any_keeps_) {
        _mm512_storeu_pd(out_ + kept_, _mm512_maskz_compress_pd(inside, x));
        kept_ += std::popcount(unsigned(inside));
      }
    }

    void finish() {
      const __m512i field = _mm512_set1_epi64(kAtLo - 1);
      for (int k = 0; k < kWindows; ++k) {
        selector_.below_[k] += _mm512_reduce_add_epi64(_mm512_and_si512(counts_[k], field));
        selector_.at_lo_[k] += _mm512_reduce_add_epi64(_mm512_and_si512(_mm512_srli_epi64(counts_[k], kFieldBits), field));
        selector_.at_hi_[k] += _mm512_reduce_add_epi64(_mm512_and_si512(_mm512_srli_epi64(counts_[k], 2 * kFieldBits), field));
        selector_.inside_count_[k] += _mm512_reduce_add_epi64(_mm512_srli_epi64(counts_[k], 3 * kFieldBits));
        counts_[k] = _mm512_setzero_si512();
      }
      selector_.kept_ += kept_;
      out_ += kept_;
      kept_ = 0;
    }

   private:
    static constexpr int kFieldBits = 16;
    static_assert(kBlock / 8 < (std::int64_t(1) << kFieldBits));
    static constexpr std::int64_t kBelow = 1, kAtLo = std::int64_t(1) << kFieldBits, kAtHi = std::int64_t(1) << (2 * kFieldBits),
                                  kInside = std::int64_t(1) << (3 * kFieldBits);
    WindowSelector& selector_;
    __m512d lo_[kWindows], hi_[kWindows];
    __m512i counts_[kWindows];
    bool interior_[kWindows], half_open_[kWindows], keeps_[kWindows];
    bool any_keeps_;
    double* out_;
    std::int64_t kept_ = 0;
  };
#endif

  // Takes another worker's counts and kept values (moved, not copied: the sweeps read every part).
  void merge(WindowSelector& other) {
    for (int k = 0; k < kWindows; ++k) {
      below_[k] += other.below_[k];
      at_lo_[k] += other.at_lo_[k];
      at_hi_[k] += other.at_hi_[k];
      inside_count_[k] += other.inside_count_[k];
    }
    merged_kept_ += other.kept_;
    overflowed_ = overflowed_ || other.overflowed_ || kept_ + merged_kept_ > keep_limit_;
    if (overflowed_) {
      candidates_.release();
      merged_.clear();
      kept_ = 0;
    } else {
      merged_.emplace_back(std::move(other.candidates_), other.kept_);
    }
    other.candidates_.release();
  }

  // The values of `ranks` (0-based, among the compared values), if the windows hold them all.
  // A rank inside a window is found among the kept values in two sweeps over them, for all ranks
  // together: one histograms each window's kept values by their fp64 patterns (ordered like the
  // non-negative values) over the window's range, which puts each rank in one bucket or two; the
  // other picks those buckets' few values, and nth_element finishes among them.
  std::optional<std::vector<double>> values(const std::vector<std::int64_t>& ranks, int threads) {
    if (overflowed_) return std::nullopt;
    // The kept values, in pieces that the sweeps share among `threads` workers.
    constexpr std::int64_t kPiece = std::int64_t(1) << 16;
    std::vector<std::pair<const double*, std::int64_t>> pieces;
    auto add_pieces = [&](const KeptBuffer& values, std::int64_t count) {
      for (std::int64_t begin = 0; begin < count; begin += kPiece) pieces.emplace_back(values.data() + begin, std::min(kPiece, count - begin));
    };
    add_pieces(candidates_, kept_);
    for (const auto& [values, count] : merged_) add_pieces(values, count);
    threads = int(std::min<std::int64_t>(threads, std::max<std::size_t>(pieces.size(), 1)));
    // ---- sweep 1: a histogram of each window's kept values
    constexpr int kBucketBits = 12;
    struct Buckets {
      std::uint64_t lo_bits = 0;
      int shift = 0;
      std::vector<std::int64_t> counts;
      std::int64_t kept = 0;
      std::size_t of(double x) const { return std::size_t((std::bit_cast<std::uint64_t>(x) - lo_bits) >> shift); }
    };
    std::array<Buckets, kWindows> buckets;
    for (int k = 0; k < kWindows; ++k) {
      const Interval& interval = intervals_[std::size_t(k)];
      if (interval.lo == interval.hi) continue;
      Buckets& b = buckets[std::size_t(k)];
      b.lo_bits = std::bit_cast<std::uint64_t>(interval.lo);
      const std::uint64_t span = std::bit_cast<std::uint64_t>(interval.hi) - b.lo_bits;  // +inf's pattern bounds an open one
      b.shift = std::max(0, int(std::bit_width(span)) - kBucketBits);
      b.counts.assign(std::size_t(span >> b.shift) + 1, 0);
    }
    std::vector<std::array<std::vector<std::int64_t>, kWindows>> worker_counts{std::size_t(threads)};
    for (auto& counts : worker_counts) {
      for (int k = 0; k < kWindows; ++k) counts[std::size_t(k)].assign(buckets[std::size_t(k)].counts.size(), 0);
    }
    for_each_chunk(std::int64_t(pieces.size()), threads, [&](int w, std::int64_t piece) {
      auto& counts = worker_counts[std::size_t(w)];
      const auto [values, count] = pieces[std::size_t(piece)];
      for (std::int64_t i = 0; i < count; ++i) {
        const double x = values[i];
        // Windows may overlap (each kept value is counted in every window that holds it).
        if (intervals_[0].keeps && intervals_[0].holds(x)) ++counts[0][buckets[0].of(x)];
        if (intervals_[1].keeps && intervals_[1].holds(x)) ++counts[1][buckets[1].of(x)];
      }
    });
    for (int k = 0; k < kWindows; ++k) {
      Buckets& b = buckets[std::size_t(k)];
      for (const auto& counts : worker_counts) {
        for (std::size_t i = 0; i < b.counts.size(); ++i) b.counts[i] += counts[std::size_t(k)][i];
      }
      for (auto c : b.counts) b.kept += c;
    }
    // ---- where each rank lies: at a window's lo, inside it, at its hi
    std::vector<double> found(ranks.size());
    struct Inside {
      std::size_t slot;  // in `found`
      int window;
      std::int64_t within;  // rank among the window's kept values
    };
    std::vector<Inside> inside;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      bool held = false;
      for (int k = 0; k < kWindows && !held; ++k) {
        const Interval& interval = intervals_[std::size_t(k)];
        std::int64_t within = ranks[r] - below_[k];
        if (within < 0) continue;
        held = true;
        if (within < at_lo_[k]) {
          found[r] = interval.lo;
        } else if ((within -= at_lo_[k]) < buckets[std::size_t(k)].kept) {
          inside.push_back({r, k, within});
        } else if ((within -= buckets[std::size_t(k)].kept) < inside_count_[k]) {
          return std::nullopt;  // among values counted but not kept
        } else if (interval.hi != interval.lo && within - inside_count_[k] < at_hi_[k]) {
          found[r] = interval.hi;
        } else {
          held = false;
        }
      }
      if (!held) return std::nullopt;
    }
    // ---- the bucket of each rank inside (adjacent ranks mostly share one)
    struct Pick {
      int window;
      std::size_t bucket;
      std::int64_t before;  // kept values of the window in lower buckets
      std::vector<std::pair<std::size_t, std::int64_t>> ranks;  // (slot in `found`, rank in the bucket)
      std::vector<double> values;
    };
    std::vector<Pick> picks;
    for (const Inside& r : inside) {
      const Buckets& b = buckets[std::size_t(r.window)];
      std::size_t bucket = 0;
      std::int64_t before = 0;
      while (before + b.counts[bucket] <= r.within) before += b.counts[bucket++];
      auto same = std::find_if(picks.begin(), picks.end(), [&](const Pick& p) { return p.window == r.window && p.bucket == bucket; });
      if (same == picks.end()) {
        same = picks.insert(picks.end(), Pick{r.window, bucket, before, {}, {}});
      }
      same->ranks.emplace_back(r.slot, r.within - before);
    }
    // ---- sweep 2: the values of those buckets, in no order
    if (!picks.empty()) {
      std::vector<std::vector<std::vector<double>>> worker_picked(std::size_t(threads), std::vector<std::vector<double>>(picks.size()));
      for_each_chunk(std::int64_t(pieces.size()), threads, [&](int w, std::int64_t piece) {
        auto& picked = worker_picked[std::size_t(w)];
        const auto [values, count] = pieces[std::size_t(piece)];
        for (std::int64_t i = 0; i < count; ++i) {
          const double x = values[i];
          for (std::size_t p = 0; p < picks.size(); ++p) {
            if (intervals_[std::size_t(picks[p].window)].keeps && intervals_[std::size_t(picks[p].window)].holds(x) && buckets[std::size_t(picks[p].window)].of(x) == picks[p].bucket) {
              picked[p].push_back(x);
            }
          }
        }
      });
      for (const auto& picked : worker_picked) {
        for (std::size_t p = 0; p < picks.size(); ++p) picks[p].values.insert(picks[p].values.end(), picked[p].begin(), picked[p].end());
      }
    }
    for (Pick& pick : picks) {
      for (const auto& [slot, rank] : pick.ranks) {
        std::nth_element(pick.values.begin(), pick.values.begin() + rank, pick.values.end());
        found[slot] = pick.values[std::size_t(rank)];
      }
    }
    return found;
  }

 private:
  // Counts one value; true when it lies inside a window (the caller keeps it).
  bool count_one(double x) {
    bool inside = false;
    for (int k = 0; k < kWindows; ++k) {
      const Interval& interval = intervals_[std::size_t(k)];
      const double lo = interval.lo, hi = interval.hi;
      below_[k] += x < lo;
      if (!interval.half_open) {
        at_lo_[k] += x == lo;
        at_hi_[k] += (x == hi) & (hi != lo);  // a collapsed interval (lo == hi) counts its value once, as at_lo
      }
      if (interval.keeps) {
        inside = inside || interval.holds(x);
      } else {
        inside_count_[k] += interval.holds(x);
      }
    }
    return inside;
  }

  Intervals intervals_;
  std::int64_t keep_limit_ = 0;
  std::int64_t below_[kWindows] = {}, at_lo_[kWindows] = {}, at_hi_[kWindows] = {};  // at_hi: 0 where lo == hi
  std::int64_t inside_count_[kWindows] = {};  // of the windows that do not keep their values
  KeptBuffer candidates_;  // the first kept_ entries: values inside either window
  std::int64_t kept_ = 0;
  std::vector<std::pair<KeptBuffer, std::int64_t>> merged_;  // other workers' candidates, and how many
  std::int64_t merged_kept_ = 0;
  bool overflowed_ = false;
};

// Neumaier summation: a running sum and the rounding errors it dropped.
struct CompensatedSum {
  double sum = 0, compensation = 0;
  void add(double value) {
    const double t = sum + value;
    if (!std::isfinite(t)) {  // an overflowing sum stays +inf; no compensation to carry
      sum = t;
      compensation = 0;
      return;
    }
    compensation += std::fabs(sum) >= std::fabs(value) ? (sum - t) + value : (value - t) + sum;
    sum = t;
  }
};

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
    int threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
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
      for (std::int64_t i = 0; i < count; ++i) positions[std::size_t(i)] = detail::rank_sample_position(begin + i, n_, samples);
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
        std::copy_n(values.begin() + b * kBlock, block_finite[std::size_t(b)], values.begin() + finite_count);
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
    };
    std::array<Ends, std::size(kPercentiles)> ends;
    for (std::size_t q = 0; q < std::size(kPercentiles); ++q) {
      const double p = kPercentiles[q];
      const auto rank = std::int64_t(std::floor(double(finite - 1) * p));
      const auto margin = std::int64_t(std::ceil(kIntervalSigmas * std::sqrt(double(finite) * p * (1 - p)))) + 1;
      ends[q] = {rank - margin, rank + 1 + margin, 0};
      if (ends[q].lo_rank < 0) return;  // too few sampled values to bound a window below: no windows
      ends[q].share = double(std::min(ends[q].hi_rank, finite - 1) - ends[q].lo_rank + 1) / double(finite);
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
        interval.hi = ends[q].hi_rank < finite ? select(ends[q].hi_rank) : std::numeric_limits<double>::infinity();
        // No tie seen at either end (and lo above the zeros that non-finite pairs count as): half-open.
        auto untied = [&](double v) { return std::isinf(v) || std::count(values.begin(), values.end(), v) == 1; };
        interval.half_open = interval.lo > 0 && interval.lo != interval.hi && untied(interval.lo) && untied(interval.hi);
        interval.keeps = interval.half_open || std::any_of(values.begin(), values.end(), [&](double v) { return v > interval.lo && v < interval.hi; });
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
    for_each_chunk(chunks_, threads_, [&](int w, std::int64_t c) { count_chunk(workers_[std::size_t(w)], c, results[std::size_t(c)]); });
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
        if (stats_.first_mismatch_indices.size() < options_.max_reported_indices) stats_.first_mismatch_indices.push_back(index);
      }
      for (int m = 0; m < kMetrics; ++m) {
        sums[std::size_t(m)].add(r.sums[std::size_t(m)].sum);
        sums[std::size_t(m)].add(r.sums[std::size_t(m)].compensation);
        ErrorSummary& s = *summaries[std::size_t(m)];
        // The first index of the largest value: a later chunk wins only with a larger one.
        if (r.max_index[std::size_t(m)] >= 0 && (s.max_index < 0 || r.max[std::size_t(m)] > s.max)) {
          s.max = r.max[std::size_t(m)];
          s.max_index = r.max_index[std::size_t(m)];
        }
      }
      for (std::size_t k = 0; k < r.histogram.size(); ++k) stats_.ulp_histogram.counts[k] += r.histogram[k];
      stats_.ulp_histogram.nan_pairs += r.nan_pairs;
      if (r.ulp_diff_max_index >= 0 && (stats_.ulp_diff_max_index < 0 || r.ulp_diff_max > stats_.ulp_diff_max)) {
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
#if defined(__AVX512F__)
      // (a selector that overflowed stops counting, which only the block-by-block path knows)
      if (count == kBlock && intervals_ &&
          std::none_of(worker.windows.begin(), worker.windows.end(), [](const WindowSelector& w) { return w.overflowed(); })) {
        count_fused_block(worker, begin, result);
        count_distances(worker, begin, count, result);
        continue;
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
#if defined(__AVX512F__)
        // The same lanes as the loop below (GCC leaves that one scalar): one vector each.
        __m512d vector_sum = _mm512_setzero_pd(), vector_max = _mm512_setzero_pd();
        for (; i + kLanes <= count; i += kLanes) {
          const __m512d v = _mm512_loadu_pd(values.data() + i);
          vector_sum = _mm512_add_pd(vector_sum, v);
          vector_max = _mm512_max_pd(v, vector_max);  // v > max ? v : max, as below
        }
        _mm512_store_pd(lane_sum.data(), vector_sum);
        _mm512_store_pd(lane_max.data(), vector_max);
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
        add_block_lanes(block, m, lane_sum, lane_max, begin, count, block.nonfinite, result);
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

  // A block's sum and maximum of metric m, from its eight lanes; `block` holds the metrics of the
  // block at `begin` when the maximum rises (the first index of the largest value is sought).
  // `nonfinite` is the block's count of non-finite pairs (the fused pass counts them itself and
  // leaves `block` unfilled unless the maximum rises).
  void add_block_lanes(const BlockMetrics<Y, R>& block, int m, const std::array<double, kLanes>& lane_sum,
                       const std::array<double, kLanes>& lane_max, std::int64_t begin, std::int64_t count,
                       std::int64_t nonfinite, ChunkResult& result) const {
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
        if (block.finite[std::size_t(k)] && values[std::size_t(k)] == block_max) {
          max = block_max;
          max_index = begin + k;
          break;
        }
      }
    }
  }

  // True when the block's maximum beats the chunk's so far, or is the chunk's first finite value.
  static bool max_rises(double block_max, std::int64_t nonfinite, std::int64_t count, const ChunkResult& result, int m) {
    return block_max > result.max[std::size_t(m)] || (result.max_index[std::size_t(m)] < 0 && nonfinite < count);
  }

#if defined(__AVX512F__)
  // ---- the fused block: the three metrics of eight pairs at a time are computed in registers,
  // summed, maximised and counted into the windows, never stored (the separate sweeps over stored
  // metrics were most of the pass). The metrics are BlockMetrics', and the lanes those of
  // count_chunk's sums: the same bits. A block with non-finite pairs, or whose maximum rises, is
  // recomputed by BlockMetrics for the rare work that needs each element.

  void count_fused_block(Worker& worker, std::int64_t begin, ChunkResult& result) {
    using Counter = WindowSelector::VectorCounter;
    std::vector<WindowSelector>& windows = worker.windows;
    for (auto& w : windows) w.reserve(kBlock);
    Counter abs_counter(windows[0]), rel_counter(windows[1]), ulp_counter(windows[2]);
    const VectorMetrics<Y, R> metrics(stats_.rel_floor);
    __m512d sum[kMetrics], max[kMetrics];
    for (int m = 0; m < kMetrics; ++m) sum[m] = max[m] = _mm512_setzero_pd();
    std::int64_t nonfinite = 0;
    const Y* y = y_ + begin;
    const R* ref = ref_ + begin;
    for (std::int64_t i = 0; i < kBlock; i += kLanes) {
      const auto p = metrics(y + i, ref + i);
      nonfinite += std::popcount(unsigned(p.nonfinite));
      const __m512d metric[kMetrics] = {p.abs, p.rel, p.ulp};
      for (int m = 0; m < kMetrics; ++m) {
        sum[m] = _mm512_add_pd(sum[m], metric[m]);
        max[m] = _mm512_max_pd(metric[m], max[m]);
      }
      abs_counter.count(p.abs);
      rel_counter.count(p.rel);
      ulp_counter.count(p.ulp);
    }
    abs_counter.finish();
    rel_counter.finish();
    ulp_counter.finish();
    result.compared += kBlock - nonfinite;
    BlockMetrics<Y, R>& block = *worker.block;
    bool computed = false;
    auto ensure_block = [&] {
      if (!computed) block.compute(y, ref, kBlock, stats_.rel_floor);
      computed = true;
    };
    if (nonfinite != 0) {
      ensure_block();
      count_nonfinite(block, begin, kBlock, result);
    }
    for (int m = 0; m < kMetrics; ++m) {
      alignas(64) std::array<double, kLanes> lane_sum, lane_max;
      _mm512_store_pd(lane_sum.data(), sum[m]);
      _mm512_store_pd(lane_max.data(), max[m]);
      const double block_max = std::max({lane_max[0], lane_max[1], lane_max[2], lane_max[3], lane_max[4], lane_max[5], lane_max[6], lane_max[7]});
      if (max_rises(block_max, nonfinite, kBlock, result, m)) ensure_block();
      add_block_lanes(block, m, lane_sum, lane_max, begin, kBlock, nonfinite, result);
      windows[std::size_t(m)].finish_block(nonfinite);
    }
  }
#endif

  void count_nonfinite(const BlockMetrics<Y, R>& block, std::int64_t begin, std::int64_t count, ChunkResult& result) const {
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
        if (result.first_mismatch_indices.size() < options_.max_reported_indices) result.first_mismatch_indices.push_back(begin + i);
      }
    }
  }

  // Integer ULP distances to the reference rounded to y's format.
  void count_distances(Worker& worker, std::int64_t begin, std::int64_t count, ChunkResult& result) const {
    const Bits* y_bits = reinterpret_cast<const Bits*>(y_ + begin);
    const Bits* ref_bits;
    if constexpr (std::is_same_v<R, Y>) {
      ref_bits = reinterpret_cast<const Bits*>(ref_ + begin);
    } else {
      for (std::int64_t i = 0; i < count; ++i) {
        worker.rounded_ref[std::size_t(i)] = to_format_bits<Y>(to_double(ref_[begin + i]));
      }
      ref_bits = worker.rounded_ref.data();
    }
    const auto summary = detail::block_distances<Y>(y_bits, ref_bits, worker.distances.data(), count);
    detail::block_histogram(worker.distances.data(), count, options_.histogram_bins, result.histogram.data());
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
        std::optional<std::vector<double>> values = workers_[0].windows[std::size_t(m)].values(wanted, threads_);
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
          if (radix[std::size_t(m)]) worker.ranks[std::size_t(m)].count_block(block.metric[std::size_t(m)].data(), finite, count);
        }
      }
    });
    for (int m = 0; m < kMetrics; ++m) {
      if (!radix[std::size_t(m)]) continue;
      for (std::size_t w = 1; w < workers_.size(); ++w) workers_[0].ranks[std::size_t(m)].merge_counts(workers_[w].ranks[std::size_t(m)]);
    }
    ++stats_.passes;
  }

  // The radix selection over the histograms of the first (or the extra) pass: replays until
  // every wanted rank is resolved.
  void radix_select(const std::vector<std::int64_t>& wanted, const std::array<bool, kMetrics>& radix,
                    std::array<std::vector<double>, kMetrics>& order) {
    std::vector<RankSelector>& ranks = workers_[0].ranks;
    for (int m = 0; m < kMetrics; ++m) {
      if (radix[std::size_t(m)]) ranks[std::size_t(m)].plan(wanted);
    }
    auto any_active = [&] { return std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.active(); }); };
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
        for (int m = 0; m < kMetrics; ++m) ranks[std::size_t(m)].merge_observations(copies[w][std::size_t(m)]);
      }
      for (auto& r : ranks) r.finish_pass();
      ++stats_.passes;
    }
    for (int m = 0; m < kMetrics; ++m) {
      if (!radix[std::size_t(m)]) continue;
      for (auto rank : wanted) order[std::size_t(m)].push_back(ranks[std::size_t(m)].value(rank));
    }
  }

  void replay_chunk(BlockMetrics<Y, R>& block, std::vector<RankSelector>& ranks, std::int64_t c) const {
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
