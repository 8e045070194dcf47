#include "support/interleaved.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

namespace fusebench::suite {

MedianInterval median_interval(std::vector<double> values) {
  MedianInterval out;
  const int n = int(values.size());
  out.n = n;
  if (n == 0) return out;
  std::sort(values.begin(), values.end());
  // the largest k with P(Binomial(n, 1/2) < k) <= 2.5 %
  int k = 0;
  double below = 0, term = std::ldexp(1.0, -n);  // P(X = 0)
  while (k < n / 2 && below + term <= 0.025) {
    below += term;
    term *= double(n - k) / double(k + 1);
    ++k;
  }
  out.median = n % 2 ? values[std::size_t(n / 2)]
                     : 0.5 * (values[std::size_t(n / 2 - 1)] + values[std::size_t(n / 2)]);
  out.low = k > 0 ? values[std::size_t(k - 1)] : values.front();
  out.high = k > 0 ? values[std::size_t(n - k)] : values.back();
  return out;
}

namespace {
// The second field of a thread's /proc schedstat: nanoseconds spent runnable on a run queue.
std::optional<double> run_delay_seconds(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t on_cpu = 0, waiting = 0;
  if (!(in >> on_cpu >> waiting)) return std::nullopt;
  return double(waiting) * 1e-9;
}
}  // namespace

MemoryCopy::MemoryCopy(std::int64_t bytes, int threads)
    : source_(static_cast<std::size_t>(std::max<std::int64_t>(bytes, 0)), std::byte{1}),
      destination_(source_.size(), std::byte{0}),
      threads_(threads),
      start_(std::max(threads, 1)),
      done_(std::max(threads, 1)) {
  if (bytes <= 0 || threads <= 0)
    throw std::invalid_argument(fmt::format(
        "MemoryCopy: bytes and threads must be positive, got {} and {}", bytes, threads));
  helper_tids_.assign(std::size_t(threads_ - 1), 0);
  for (int t = 1; t < threads_; ++t) {
    helpers_.emplace_back([this, t] {
      helper_tids_[std::size_t(t - 1)] = int(gettid());
      start_.arrive_and_wait();  // the constructor's: the tid is published
      while (true) {
        start_.arrive_and_wait();
        if (stopping_) return;
        copy_part(t);
        done_.arrive_and_wait();
      }
    });
  }
  start_.arrive_and_wait();
}

MemoryCopy::~MemoryCopy() {
  stopping_ = true;  // published to the helpers by the barrier
  start_.arrive_and_wait();
  for (auto& h : helpers_) h.join();
}

void MemoryCopy::copy_part(int part) {
  const std::size_t size = source_.size();
  const std::size_t share = (size + std::size_t(threads_) - 1) / std::size_t(threads_);
  const std::size_t begin = std::min(size, share * std::size_t(part)),
                    end = std::min(size, begin + share);
  std::memcpy(destination_.data() + begin, source_.data() + begin, end - begin);
}

void MemoryCopy::run() {
  start_.arrive_and_wait();
  copy_part(0);
  done_.arrive_and_wait();
  benchmark::DoNotOptimize(destination_.data());
  benchmark::ClobberMemory();
}

double MemoryCopy::run_seconds() {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::optional<double> MemoryCopy::run_queue_wait_seconds() const {
  std::optional<double> total = run_delay_seconds("/proc/thread-self/schedstat");
  for (int tid : helper_tids_) {
    if (!total) return std::nullopt;
    const auto waited = run_delay_seconds(fmt::format("/proc/self/task/{}/schedstat", tid));
    total = waited ? std::optional(*total + *waited) : std::nullopt;
  }
  return total;
}

double round_share(double traffic_bytes, double kernel_seconds, std::int64_t copied_bytes,
                   double copy_seconds) {
  return (traffic_bytes / kernel_seconds) / (2.0 * double(copied_bytes) / copy_seconds);
}

namespace {
int configured_rounds = kInterleavedRounds;
}  // namespace

int interleaved_rounds() { return configured_rounds; }

void set_interleaved_rounds(int rounds) {
  if (rounds < 6 || rounds > 1001)
    throw std::invalid_argument(fmt::format(
        "expected a whole number from 6 (below, no order statistic reaches a 95 % interval) to "
        "1001, got {}",
        rounds));
  configured_rounds = rounds;
}

PairedRounds paired_rounds(const std::function<double()>& first,
                           const std::function<double()>& second, int rounds,
                           const std::function<void()>& round_begins,
                           const std::function<void()>& round_ends) {
  PairedRounds out;
  const double pair_seconds = std::min(first(), first()) + std::min(second(), second());
  out.pairs_per_round =
      int(std::clamp(std::ceil(kMinRoundSeconds / std::max(pair_seconds, 1e-6)), 1.0, 1000.0));
  for (int r = 0; r < rounds; ++r) {
    if (round_begins) round_begins();
    double a = 0, b = 0;
    for (int i = 0; i < out.pairs_per_round; ++i) {
      if ((r + i) % 2 == 0) {
        a += first();
        b += second();
      } else {
        b += second();
        a += first();
      }
    }
    out.first_seconds.push_back(a / out.pairs_per_round);
    out.second_seconds.push_back(b / out.pairs_per_round);
    if (round_ends) round_ends();
  }
  return out;
}

namespace {
void check_rounds(int rounds, double traffic_bytes) {
  if (rounds <= 0 || traffic_bytes < 2)
    throw std::invalid_argument(fmt::format(
        "copy_share_rounds: rounds and traffic must be positive, got {} rounds and {} bytes",
        rounds, traffic_bytes));
}

// The rounds' figures into `out` (traffic and copied bytes set); `round_waits`: each round's copy
// run-queue wait, or empty.
void take_rounds(CopyShareRounds& out, const PairedRounds& paired,
                 const std::vector<double>& round_waits) {
  out.pairs_per_round = paired.pairs_per_round;
  for (std::size_t r = 0; r < paired.first_seconds.size(); ++r) {
    const double kernel = paired.first_seconds[r], copied = paired.second_seconds[r];
    if (kernel <= 0 || copied <= 0) continue;  // a clock too coarse for the run: no figure
    out.kernel_seconds.push_back(kernel);
    out.copy_seconds.push_back(copied);
    out.shares.push_back(round_share(out.traffic_bytes, kernel, out.copied_bytes, copied));
    if (r < round_waits.size())
      out.copy_waits.push_back(round_waits[r] / (copied * out.pairs_per_round * out.threads));
  }
  out.share = median_interval(out.shares);
}
}  // namespace

CopyShareRounds copy_share_rounds(const std::function<double()>& kernel_seconds,
                                  double traffic_bytes, int threads, int rounds) {
  check_rounds(rounds, traffic_bytes);
  CopyShareRounds out;
  out.traffic_bytes = traffic_bytes;
  out.threads = threads;
  MemoryCopy copy(std::int64_t(traffic_bytes / 2), threads);
  out.copied_bytes = copy.bytes();
  // Each copy's run-queue wait, read around it (outside its timing) and summed per round as the
  // copy's seconds are.
  double waited = 0;
  bool waits_known = true;
  std::vector<double> round_waits;
  const PairedRounds paired = paired_rounds(
      kernel_seconds,
      [&] {
        const auto before = copy.run_queue_wait_seconds();
        const double seconds = copy.run_seconds();
        const auto after = copy.run_queue_wait_seconds();
        waits_known = waits_known && before && after;
        if (waits_known) waited += *after - *before;
        return seconds;
      },
      rounds, [&] { waited = 0; }, [&] { round_waits.push_back(waited); });
  if (!waits_known) round_waits.clear();
  take_rounds(out, paired, round_waits);
  return out;
}

CopyShareRounds copy_share_rounds(const std::function<double()>& kernel_seconds,
                                  const std::function<double()>& copy_seconds, double traffic_bytes,
                                  std::int64_t copied_bytes, int rounds) {
  check_rounds(rounds, traffic_bytes);
  if (copied_bytes <= 0)
    throw std::invalid_argument(
        fmt::format("copy_share_rounds: the copy must move bytes, got {}", copied_bytes));
  CopyShareRounds out;
  out.traffic_bytes = traffic_bytes;
  out.copied_bytes = copied_bytes;
  take_rounds(out, paired_rounds(kernel_seconds, copy_seconds, rounds), {});
  return out;
}

void record_copy_share(benchmark::State& state, const CopyShareRounds& rounds) {
  if (rounds.share.n == 0) return;
  state.counters["copy_share"] = rounds.share.median;
  state.counters["copy_share_lo"] = rounds.share.low;
  state.counters["copy_share_hi"] = rounds.share.high;
  state.counters["copy_share_rounds"] = rounds.share.n;
  std::vector<double> copy_rates;
  for (double s : rounds.copy_seconds) copy_rates.push_back(2.0 * double(rounds.copied_bytes) / s);
  state.counters["copy_bytes_per_second"] = median_interval(copy_rates).median;
  if (!rounds.copy_waits.empty())
    state.counters["copy_share_wait"] = median_interval(rounds.copy_waits).median;
}

nlohmann::json copy_share_evidence(const CopyShareRounds& rounds) {
  const std::string copy = rounds.threads > 0
                               ? "a memcpy of the same traffic on the same threads"
                               : "a device-to-device copy of the same traffic on the kernel's "
                                 "stream, both timed by its events";
  return {
      {"schema", "fusebench.copy_share_rounds/1"},
      {"about",
       "each round: the kernel once and " + copy +
           ", the order alternating; share = the kernel's traffic rate over the copy's; the "
           "median's 95 % interval from sign-test order statistics; copy_waits: per round, the "
           "share of the copy threads' time spent runnable but waiting for a CPU (schedstat), the "
           "machine's load during the round (none for a device's copy)"},
      {"traffic_bytes", rounds.traffic_bytes},
      {"copied_bytes", rounds.copied_bytes},
      {"threads", rounds.threads},
      {"pairs_per_round", rounds.pairs_per_round},
      {"kernel_seconds", rounds.kernel_seconds},
      {"copy_seconds", rounds.copy_seconds},
      {"shares", rounds.shares},
      {"copy_waits", rounds.copy_waits},
      {"share",
       {{"median", rounds.share.median},
        {"low", rounds.share.low},
        {"high", rounds.share.high},
        {"rounds", rounds.share.n}}},
  };
}

}  // namespace fusebench::suite
