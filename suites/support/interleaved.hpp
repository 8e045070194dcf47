// Speed measured like the numerics: measurements that are compared run interleaved, round after
// round in one process, so that a change of load on the machine falls on all of them alike, and a
// per-round figure (a speed-up, a share of the copy) is judged by its median and the median's
// distribution-free 95 % interval (the sign test's order statistics: no assumption on the
// figures' distribution).
#pragma once

#include <benchmark/benchmark.h>

#include <barrier>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace fusebench::suite {

// The median of n per-round figures and its 95 % interval [x_(k), x_(n+1-k)] of the sorted figures,
// k the largest with P(Binomial(n, 1/2) < k) <= 2.5 % (31 rounds: the 10th and the 22nd figure).
// Below 6 figures no order statistic reaches 95 %: the interval is then the whole range.
struct MedianInterval {
  double median = 0, low = 0, high = 0;
  int n = 0;
};
MedianInterval median_interval(std::vector<double> values);

// The rounds the interleaved comparisons run: 31 give an interval between the 10th and the 22nd
// figure, in seconds per comparison on this machine's kernels.
constexpr int kInterleavedRounds = 31;
// The rounds this process runs: kInterleavedRounds unless a suite's --interleaved-rounds=N set
// others (the smoke tests run 7: they check that the figures exist, not what they say).
int interleaved_rounds();
void set_interleaved_rounds(int rounds);

// memcpy of `bytes` split over `threads` threads, each thread its own contiguous part: the bandwidth
// yardstick. Its traffic is 2 * bytes (each byte read once and written once, as STREAM counts it).
// (Parts taken from a shared counter in 256 KiB tasks, as the engine's pool hands out its tasks,
// copied slower than fixed halves on the loaded two-core machine: 0.84 to 0.88 of their speed.)
// The helper threads live as long as the copy and wait at a barrier between copies, as the
// engine's thread pool waits between kernels: the kernel pays no thread start per run, nor does
// its yardstick.
class MemoryCopy {
 public:
  MemoryCopy(std::int64_t bytes, int threads);
  ~MemoryCopy();
  MemoryCopy(const MemoryCopy&) = delete;
  MemoryCopy& operator=(const MemoryCopy&) = delete;
  void run();            // one copy
  double run_seconds();  // one copy, its wall time
  std::int64_t bytes() const { return std::int64_t(source_.size()); }
  int threads() const { return threads_; }
  const std::vector<std::byte>& destination() const { return destination_; }
  // Seconds the copy's threads (the caller's and the helpers') have spent runnable but waiting for
  // a CPU, from the kernel's per-thread schedstat; nullopt where the kernel does not keep it.
  // Read between copies: the helpers wait at the barrier then, which adds nothing to it.
  std::optional<double> run_queue_wait_seconds() const;

 private:
  void copy_part(int part);
  std::vector<std::byte> source_, destination_;
  int threads_;
  bool stopping_ = false;
  std::barrier<> start_, done_;
  std::vector<std::thread> helpers_;
  std::vector<int> helper_tids_;  // filled before the constructor returns
};

// Two measurements interleaved: each round runs `first` and `second` alternately, run by run, for
// enough pairs to last kMinRoundSeconds, the order of each pair alternating; a round's figure for
// each is its mean time per run (seconds) over the round's pairs. The first two runs of each,
// untimed, take page faults and size the rounds.
constexpr double kMinRoundSeconds = 0.04;
struct PairedRounds {
  std::vector<double> first_seconds, second_seconds;
  int pairs_per_round = 1;
};
// round_begins and round_ends, where given, run around each timed round (not the sizing runs).
PairedRounds paired_rounds(const std::function<double()>& first,
                           const std::function<double()>& second, int rounds = interleaved_rounds(),
                           const std::function<void()>& round_begins = {},
                           const std::function<void()>& round_ends = {});

// A kernel's share of the copy, round by round: each round runs the kernel and a memcpy of the same
// traffic (traffic_bytes / 2 copied) on the same threads, alternating run by run, for enough pairs
// to last kMinRoundSeconds: a spell of other load falls on both sides of a round alike, and a
// scheduler's time slice taken by another process moves a round by a fraction, not a multiple (one
// 4 ms LayerNorm run against one copy read anywhere from 20 % to 177 % of the copy on the loaded
// two-core machine). A round's share is the kernel's bytes per second over the copy's, i.e. the
// copy's time over the kernel's when both move the same bytes.
struct CopyShareRounds {
  double traffic_bytes = 0;  // the kernel's counted traffic per run
  std::int64_t copied_bytes = 0;
  int threads = 0;  // the host threads the copy ran on; 0 for a device's own copy
  int pairs_per_round = 1;
  std::vector<double> kernel_seconds, copy_seconds, shares;
  MedianInterval share;
  // Per round: the share of the copy's thread time spent waiting for a CPU (run queue wait over
  // the round's copy time times its threads); empty where the kernel keeps no schedstat.
  std::vector<double> copy_waits;
};
// `kernel_seconds`: runs the kernel once and returns its time in seconds (what the benchmark times);
// kernel_seconds and copy_seconds of the result are per run, each the mean over its round's pairs.
CopyShareRounds copy_share_rounds(const std::function<double()>& kernel_seconds,
                                  double traffic_bytes, int threads,
                                  int rounds = interleaved_rounds());
// The same rounds against a device's own copy: `copy_seconds` runs one copy of `copied_bytes` (its
// traffic twice that) and returns its seconds, as `kernel_seconds` does the kernel's; on a GPU both
// are timed by events on the stream the kernel runs on, so that the two figures of a round see the
// same device, clocks and other work. No run-queue waits: the copy runs on no host thread.
CopyShareRounds copy_share_rounds(const std::function<double()>& kernel_seconds,
                                  const std::function<double()>& copy_seconds, double traffic_bytes,
                                  std::int64_t copied_bytes, int rounds = interleaved_rounds());
// One round's share: the kernel's rate over the copy's, both as traffic.
double round_share(double traffic_bytes, double kernel_seconds, std::int64_t copied_bytes,
                   double copy_seconds);

// Counters copy_share (median), copy_share_lo, copy_share_hi, copy_share_rounds, copy_bytes_per_second
// (the interleaved copy's median rate, traffic), and copy_share_wait (the median round's copy_waits)
// where the waits were measured.
void record_copy_share(benchmark::State& state, const CopyShareRounds& rounds);
// The rounds as evidence: every round's kernel and copy seconds and its share, and the interval.
nlohmann::json copy_share_evidence(const CopyShareRounds& rounds);

}  // namespace fusebench::suite
