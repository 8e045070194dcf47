#include "selection.hpp"

#include "parallel.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace fusebench::error_stats_internal {

// ---- RankSelector

void RankSelector::count_block(const double* values, const std::uint8_t* finite,
                               std::int64_t count) {
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

void RankSelector::plan(const std::vector<std::int64_t>& ranks) {
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

void RankSelector::merge_counts(const RankSelector& other) {
  for (std::size_t table = 0; table < 2; ++table) {
    for (std::size_t key = 0; key < kKeyBins; ++key) {
      top_histogram_[table][key] += other.top_histogram_[table][key];
      top_range_[table][2 * key] =
          std::min(top_range_[table][2 * key], other.top_range_[table][2 * key]);
      top_range_[table][2 * key + 1] =
          std::max(top_range_[table][2 * key + 1], other.top_range_[table][2 * key + 1]);
    }
  }
}

RankSelector RankSelector::pass_copy() const {
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

void RankSelector::merge_observations(RankSelector& other) {
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    Probe& mine = probes_[i];
    Probe& theirs = other.probes_[i];
    if (mine.store) {
      mine.values.insert(mine.values.end(), theirs.values.begin(), theirs.values.end());
      theirs.values = {};
    } else {
      mine.min = std::min(mine.min, theirs.min);
      mine.max = std::max(mine.max, theirs.max);
      for (std::size_t k = 0; k < mine.histogram.size(); ++k)
        mine.histogram[k] += theirs.histogram[k];
      mine.distinct.merge(theirs.distinct);
    }
  }
}

void RankSelector::finish_pass() {
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
        while (rank >= before + std::int64_t(probe.histogram[sub]))
          before += probe.histogram[sub++];
        add_probe_to(next, rank, probe.level + 1, (probe.prefix << 16) | sub, before,
                     probe.histogram[sub]);
      }
    }
  }
  probes_ = std::move(next);
  mark_wanted_top_bins();
}

void RankSelector::add_probe_to(std::vector<Probe>& probes, std::int64_t rank, int level,
                                std::uint64_t prefix, std::int64_t rank_base, std::int64_t count) {
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

void RankSelector::mark_wanted_top_bins() {
  wanted_top_.assign(kKeyBins, 0);
  for (const auto& probe : probes_) wanted_top_[probe.prefix >> (16 * (probe.level - 1))] = 1;
}

std::vector<double> RankSelector::initial_ranges() {
  std::vector<double> ranges(2 * kKeyBins);
  for (std::size_t i = 0; i < kKeyBins; ++i) {
    ranges[2 * i] = std::numeric_limits<double>::infinity();
    ranges[2 * i + 1] = -std::numeric_limits<double>::infinity();
  }
  return ranges;
}

RankSelector::RankSelector(std::int64_t stream_length) : whole_(stream_length <= kStoreLimit) {
  if (whole_) {
    stored_.reserve(std::size_t(stream_length));
  } else {
    top_histogram_ = {std::vector<std::uint32_t>(kKeyBins, 0),
                      std::vector<std::uint32_t>(kKeyBins, 0)};
    top_range_ = {initial_ranges(), initial_ranges()};
  }
}

void RankSelector::DistinctCounter::merge(const DistinctCounter& other) {
  if (other.overflowed_) overflowed_ = true;
  for (const auto& e : other.table_) {
    if (e.count != 0) add(e.bits, e.count);
  }
}

std::optional<double> RankSelector::DistinctCounter::rank_value(std::int64_t within) const {
  if (overflowed_ || used_ == 0) return std::nullopt;
  std::vector<Entry> entries;
  for (const auto& e : table_) {
    if (e.count != 0) entries.push_back(e);
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.bits < b.bits; });
  std::int64_t before = 0;
  for (const auto& e : entries) {
    before += std::int64_t(e.count);
    if (within < before) return std::bit_cast<double>(e.bits);
  }
  return std::nullopt;
}

// ---- WindowSelector

void WindowSelector::count_block(const double* values, std::int64_t count, std::int64_t nonfinite) {
  if (overflowed_) return;  // kept too much to answer anything: stop counting
  reserve(count);
  std::int64_t i = 0;
#if defined(FUSEBENCH_ERROR_STATS_VECTORS)
  VectorCounter counter(*this);
  i = count - count % kVectorLanes;
  counter.count_stored(values, i);
  counter.finish();
#endif
  count_values(values + i, count - i);
  finish_block(nonfinite);
}

void WindowSelector::finish_block(std::int64_t nonfinite) {
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

void WindowSelector::merge(WindowSelector& other) {
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

std::optional<std::vector<double>> WindowSelector::values(const std::vector<std::int64_t>& ranks,
                                                          int threads) {
  if (overflowed_) return std::nullopt;
  // The kept values, in pieces that the sweeps share among `threads` workers.
  constexpr std::int64_t kPiece = std::int64_t(1) << 16;
  std::vector<std::pair<const double*, std::int64_t>> pieces;
  auto add_pieces = [&](const KeptBuffer& values, std::int64_t count) {
    for (std::int64_t begin = 0; begin < count; begin += kPiece)
      pieces.emplace_back(values.data() + begin, std::min(kPiece, count - begin));
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
    std::size_t of(double x) const {
      return std::size_t((std::bit_cast<std::uint64_t>(x) - lo_bits) >> shift);
    }
  };
  std::array<Buckets, kWindows> buckets;
  for (int k = 0; k < kWindows; ++k) {
    const Interval& interval = intervals_[std::size_t(k)];
    if (interval.lo == interval.hi) continue;
    Buckets& b = buckets[std::size_t(k)];
    b.lo_bits = std::bit_cast<std::uint64_t>(interval.lo);
    // +inf's pattern bounds an open one
    const std::uint64_t span = std::bit_cast<std::uint64_t>(interval.hi) - b.lo_bits;
    b.shift = std::max(0, int(std::bit_width(span)) - kBucketBits);
    b.counts.assign(std::size_t(span >> b.shift) + 1, 0);
  }
  std::vector<std::array<std::vector<std::int64_t>, kWindows>> worker_counts{std::size_t(threads)};
  // The values a window holds and keeps are those whose fp64 patterns (ordered like the
  // non-negative values) lie in one range, [held_begin, held_begin + held_width): one unsigned
  // comparison. Past each window's buckets lie kSpare slots for the values it does not hold:
  // every value increments a slot, with no branch (continuous errors fall inside or outside a
  // window at random, and a branch on it mispredicts), and those outside spread over the spares by
  // their lane, so that neighbours do not wait on each other's increment of one slot.
  constexpr std::size_t kSpare = 8;
  std::array<std::uint64_t, kWindows> held_begin{}, held_width{};
  for (int k = 0; k < kWindows; ++k) {
    const Interval& interval = intervals_[std::size_t(k)];
    if (!interval.keeps) continue;  // the empty range
    const std::uint64_t lo_bits = std::bit_cast<std::uint64_t>(interval.lo);
    held_begin[std::size_t(k)] = interval.half_open ? lo_bits : lo_bits + 1;
    held_width[std::size_t(k)] =
        std::bit_cast<std::uint64_t>(interval.hi) - held_begin[std::size_t(k)];
  }
  for (auto& counts : worker_counts) {
    for (int k = 0; k < kWindows; ++k)
      counts[std::size_t(k)].assign(buckets[std::size_t(k)].counts.size() + kSpare, 0);
  }
  for_each_chunk(std::int64_t(pieces.size()), threads, [&](int w, std::int64_t piece) {
    auto& counts = worker_counts[std::size_t(w)];
    const auto [values, count] = pieces[std::size_t(piece)];
    const auto* bits = reinterpret_cast<const std::uint64_t*>(values);
    // Windows may overlap (each kept value is counted in every window that holds it).
    for (int k = 0; k < kWindows; ++k) {
      const Buckets& b = buckets[std::size_t(k)];
      std::int64_t* window_counts = counts[std::size_t(k)].data();
      const std::uint64_t begin = held_begin[std::size_t(k)], width = held_width[std::size_t(k)];
      const std::size_t spare = b.counts.size();
      std::int64_t i = 0;
#if defined(__AVX512F__)
      // The slots of eight values computed in a vector, then incremented one by one.
      const __m512i vbegin = _mm512_set1_epi64(std::int64_t(begin)),
                    vwidth = _mm512_set1_epi64(std::int64_t(width)),
                    vlo = _mm512_set1_epi64(std::int64_t(b.lo_bits)),
                    vspare = _mm512_add_epi64(_mm512_set1_epi64(std::int64_t(spare)),
                                              _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
      const __m128i vshift = _mm_cvtsi32_si128(b.shift);
      alignas(64) std::array<std::uint64_t, 8> slots;
      for (; i + 8 <= count; i += 8) {
        const __m512i x = _mm512_loadu_si512(bits + i);
        const __mmask8 held = _mm512_cmplt_epu64_mask(_mm512_sub_epi64(x, vbegin), vwidth);
        const __m512i bucket = _mm512_srl_epi64(_mm512_sub_epi64(x, vlo), vshift);
        _mm512_store_si512(slots.data(), _mm512_mask_blend_epi64(held, vspare, bucket));
        for (const std::uint64_t slot : slots) ++window_counts[slot];
      }
#endif
      for (; i < count; ++i) {
        const bool held = bits[i] - begin < width;
        ++window_counts[held ? std::size_t((bits[i] - b.lo_bits) >> b.shift)
                             : spare + std::size_t(i) % kSpare];
      }
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
    // (slot in `found`, rank in the bucket)
    std::vector<std::pair<std::size_t, std::int64_t>> ranks;
    std::vector<double> values;
  };
  std::vector<Pick> picks;
  for (const Inside& r : inside) {
    const Buckets& b = buckets[std::size_t(r.window)];
    std::size_t bucket = 0;
    std::int64_t before = 0;
    while (before + b.counts[bucket] <= r.within) before += b.counts[bucket++];
    auto same = std::find_if(picks.begin(), picks.end(), [&](const Pick& p) {
      return p.window == r.window && p.bucket == bucket;
    });
    if (same == picks.end()) {
      same = picks.insert(picks.end(), Pick{r.window, bucket, before, {}, {}});
    }
    same->ranks.emplace_back(r.slot, r.within - before);
  }
  // ---- sweep 2: the values of those buckets, in no order
  if (!picks.empty()) {
    // A pick's values are those whose fp64 patterns lie in one range (non-negative values order
    // like their patterns): the bucket's, within the window's ends. Each worker stores every value
    // at its pick's end and advances the end past those in the range, with no branch; the end has
    // room for the bucket's count (sweep 1's) and one vector more.
    struct PatternRange {
      std::uint64_t begin, end;  // [begin, end)
    };
    std::vector<PatternRange> ranges;
    for (const Pick& pick : picks) {
      const Interval& interval = intervals_[std::size_t(pick.window)];
      const Buckets& b = buckets[std::size_t(pick.window)];
      const std::uint64_t lo_bits = std::bit_cast<std::uint64_t>(interval.lo);
      const std::uint64_t hi_bits = std::bit_cast<std::uint64_t>(interval.hi);
      const std::uint64_t window_begin = interval.half_open ? lo_bits : lo_bits + 1;
      const std::uint64_t bucket_begin = b.lo_bits + (std::uint64_t(pick.bucket) << b.shift);
      const std::uint64_t bucket_end = b.lo_bits + (std::uint64_t(pick.bucket + 1) << b.shift);
      ranges.push_back({std::max(window_begin, bucket_begin), std::min(hi_bits, bucket_end)});
    }
    std::vector<std::vector<std::vector<double>>> worker_picked(
        std::size_t(threads), std::vector<std::vector<double>>(picks.size()));
    std::vector<std::vector<std::int64_t>> worker_ends(std::size_t(threads),
                                                       std::vector<std::int64_t>(picks.size()));
    for (auto& picked : worker_picked) {
      for (std::size_t p = 0; p < picks.size(); ++p) {
        const Buckets& b = buckets[std::size_t(picks[p].window)];
        picked[p].resize(std::size_t(b.counts[picks[p].bucket]) + 8);
      }
    }
    for_each_chunk(std::int64_t(pieces.size()), threads, [&](int w, std::int64_t piece) {
      const auto [values, count] = pieces[std::size_t(piece)];
      const auto* bits = reinterpret_cast<const std::uint64_t*>(values);
      for (std::size_t p = 0; p < picks.size(); ++p) {
        const PatternRange range = ranges[p];
        double* out = worker_picked[std::size_t(w)][p].data();
        std::int64_t end = worker_ends[std::size_t(w)][p];
        std::int64_t i = 0;
#if defined(__AVX512F__)
        const __m512i begin_bits = _mm512_set1_epi64(std::int64_t(range.begin));
        const __m512i end_bits = _mm512_set1_epi64(std::int64_t(range.end));
        for (; i + 8 <= count; i += 8) {
          const __m512i x = _mm512_loadu_si512(bits + i);
          const __mmask8 in =
              _mm512_cmpge_epu64_mask(x, begin_bits) & _mm512_cmplt_epu64_mask(x, end_bits);
          _mm512_storeu_pd(out + end, _mm512_maskz_compress_pd(in, _mm512_castsi512_pd(x)));
          end += std::popcount(unsigned(in));
        }
#endif
        for (; i < count; ++i) {
          out[end] = values[i];
          end += (bits[i] >= range.begin) & (bits[i] < range.end);
        }
        worker_ends[std::size_t(w)][p] = end;
      }
    });
    for (std::size_t w = 0; w < worker_picked.size(); ++w) {
      for (std::size_t p = 0; p < picks.size(); ++p) {
        const auto& picked = worker_picked[w][p];
        picks[p].values.insert(picks[p].values.end(), picked.begin(),
                               picked.begin() + worker_ends[w][p]);
      }
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

// Window by window, in loops of one comparison each, which the compiler vectorises (a branch per
// value mispredicts on continuous errors, half of which lie on either side of the median's lo);
// then the kept values, each stored and the end advanced by whether it lies inside (room for the
// block was reserved).
void WindowSelector::count_values(const double* __restrict values, std::int64_t count) {
  for (int k = 0; k < kWindows; ++k) {
    const Interval& interval = intervals_[std::size_t(k)];
    const double lo = interval.lo, hi = interval.hi;
    std::int64_t below = 0;
    for (std::int64_t i = 0; i < count; ++i) below += values[i] < lo;
    below_[k] += below;
    if (!interval.half_open) {
      std::int64_t at_lo = 0;
      for (std::int64_t i = 0; i < count; ++i) at_lo += values[i] == lo;
      at_lo_[k] += at_lo;
      if (hi != lo) {  // a collapsed interval (lo == hi) counts its value once, as at_lo
        std::int64_t at_hi = 0;
        for (std::int64_t i = 0; i < count; ++i) at_hi += values[i] == hi;
        at_hi_[k] += at_hi;
      }
    }
    if (!interval.keeps && lo != hi) {  // (not half-open: no value lies strictly inside [lo, lo])
      std::int64_t inside = 0;
      for (std::int64_t i = 0; i < count; ++i) inside += (values[i] > lo) & (values[i] < hi);
      inside_count_[k] += inside;
    }
  }
  const Interval &first = intervals_[0], &second = intervals_[1];
  if (!first.keeps && !second.keeps) return;
  // A window that does not keep contributes an empty interval here: (+inf, +inf) holds nothing.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double lo0 = first.keeps ? first.lo : kInf, hi0 = first.keeps ? first.hi : kInf;
  const double lo1 = second.keeps ? second.lo : kInf, hi1 = second.keeps ? second.hi : kInf;
  const bool closed0 = first.half_open, closed1 = second.half_open;  // lo itself inside
  double* __restrict out = candidates_.data() + kept_;
  std::int64_t kept = 0;
  // (the tail of a block, fewer values than a vector's: VectorCounter counts the rest)
  for (std::int64_t i = 0; i < count; ++i) {
    const double x = values[i];
    const bool in0 = (closed0 ? x >= lo0 : x > lo0) & (x < hi0);
    const bool in1 = (closed1 ? x >= lo1 : x > lo1) & (x < hi1);
    out[kept] = x;
    kept += in0 | in1;
  }
  kept_ += kept;
}

}  // namespace fusebench::error_stats_internal
