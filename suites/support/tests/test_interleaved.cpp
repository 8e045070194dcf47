// The interleaving helper: the median's order-statistic interval, and a replay of recorded rounds
// (reports/tests/fixtures/share_rounds.json: two runs' dumps of the same code, and constructed
// rounds around a target) through it: every recorded interval is what the helper computes from the
// recorded times, so the report's decisions on those intervals (reports/tests/test_share_rounds.py)
// are decisions on the rounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "support/interleaved.hpp"

namespace fusebench::suite {
namespace {

TEST(MedianInterval, ThirtyOneRoundsTakeTheTenthAndTheTwentySecond) {
  std::vector<double> values;
  for (int i = 31; i >= 1; --i) values.push_back(double(i));  // unsorted on purpose
  const MedianInterval m = median_interval(values);
  EXPECT_EQ(m.n, 31);
  EXPECT_EQ(m.median, 16);
  EXPECT_EQ(m.low, 10);
  EXPECT_EQ(m.high, 22);
}

TEST(MedianInterval, EvenCountAveragesTheMiddleTwo) {
  std::vector<double> values;
  for (int i = 1; i <= 30; ++i) values.push_back(double(i));
  const MedianInterval m = median_interval(values);
  EXPECT_EQ(m.median, 15.5);
  EXPECT_EQ(m.low, 10);  // n = 30: P(X <= 9) = 2.1 %, P(X <= 10) = 4.9 %
  EXPECT_EQ(m.high, 21);
}

TEST(MedianInterval, TooFewRoundsGiveTheWholeRange) {
  const MedianInterval m = median_interval({3.0, 1.0, 2.0, 5.0, 4.0});
  EXPECT_EQ(m.median, 3);
  EXPECT_EQ(m.low, 1);
  EXPECT_EQ(m.high, 5);
  EXPECT_EQ(median_interval({}).n, 0);
}

TEST(CopyShareRounds, RefusesNoRoundsAndNoTraffic) {
  EXPECT_THROW(copy_share_rounds([] { return 1.0; }, 1024, 1, 0), std::invalid_argument);
  EXPECT_THROW(copy_share_rounds([] { return 1.0; }, 0, 1, 3), std::invalid_argument);
  EXPECT_THROW(MemoryCopy(0, 1), std::invalid_argument);
}

TEST(CopyShareRounds, EveryRoundTimesTheKernelAndTheCopy) {
  int calls = 0;
  const CopyShareRounds r = copy_share_rounds(
      [&] {
        ++calls;
        return 1e-3;
      },
      2 << 20, 2, 7);
  // 2 untimed calls size the rounds: 1 ms runs and a copy, at most 40 pairs a round
  EXPECT_GE(r.pairs_per_round, 1);
  EXPECT_LE(r.pairs_per_round, 40);
  EXPECT_EQ(calls, 2 + 7 * r.pairs_per_round);
  EXPECT_EQ(r.copied_bytes, 1 << 20);
  ASSERT_EQ(r.shares.size(), 7u);
  for (std::size_t i = 0; i < r.shares.size(); ++i)
    EXPECT_DOUBLE_EQ(r.shares[i], r.copy_seconds[i] / r.kernel_seconds[i]);
}

TEST(CopyShareRounds, ADevicesOwnCopyAlternatesWithTheKernelRunByRun) {
  // A GPU's copy timed by events, here a function of known times: each round's share is the copy's
  // time over the kernel's (same traffic), the kernel and the copy alternate, and the order of each
  // pair alternates from round to round.
  std::string order;
  const CopyShareRounds r = copy_share_rounds(
      [&] {
        order += 'k';
        return 1e-3;
      },
      [&] {
        order += 'c';
        return 0.4e-3;
      },
      2 << 20, 1 << 20, 5);
  EXPECT_EQ(r.copied_bytes, 1 << 20);
  EXPECT_EQ(r.threads, 0);  // no host threads copied
  EXPECT_TRUE(r.copy_waits.empty());
  ASSERT_EQ(r.shares.size(), 5u);
  // (each side a mean over the round's 29 runs: equal up to the sums' rounding)
  for (double share : r.shares) EXPECT_NEAR(share, 0.4, 1e-12);
  EXPECT_NEAR(r.share.median, 0.4, 1e-12);
  // 1.4 ms a pair: 29 pairs make a round of at least 40 ms; two untimed runs of each size it
  ASSERT_EQ(r.pairs_per_round, 29);
  EXPECT_EQ(order.substr(4, 4), "kcck");  // after the four sizing runs, round 0: pairs 0, 1
  EXPECT_EQ(order.substr(4 + 2 * 29, 4), "ckkc");  // round 1 starts with the copy
  EXPECT_EQ(order.size(), 4 + 2 * 29 * 5u);
  EXPECT_THROW(copy_share_rounds([] { return 1.0; }, [] { return 1.0; }, 1024, 0),
               std::invalid_argument);
  EXPECT_THROW(copy_share_rounds([] { return 1.0; }, [] { return 1.0; }, 1024, 512, 0),
               std::invalid_argument);
}

TEST(MemoryCopy, TheThreadsPartsCoverEveryByte) {
  // not a multiple of the thread counts: the last part is shorter
  const std::int64_t bytes = (std::int64_t(3) << 18) + 5;
  for (int threads : {1, 2, 3}) {
    MemoryCopy copy(bytes, threads);
    for (int run = 0; run < 3; ++run) {
      copy.run();
      ASSERT_EQ(std::count(copy.destination().begin(), copy.destination().end(), std::byte{1}),
                bytes)
          << threads << " threads, run " << run;
    }
  }
}

TEST(CopyShareRounds, EachRoundRecordsTheCopyThreadsWaitForACpu) {
  const CopyShareRounds r = copy_share_rounds([] { return 1e-3; }, 2 << 20, 2, 5);
  if (!MemoryCopy(1024, 2).run_queue_wait_seconds()) GTEST_SKIP() << "no schedstat here";
  ASSERT_EQ(r.copy_waits.size(), 5u);
  // a run queue's wait only grows; its upper end depends on the machine's load
  for (double w : r.copy_waits) {
    EXPECT_GE(w, 0);
    EXPECT_TRUE(std::isfinite(w));
  }
}

TEST(PairedRounds, RoundHooksRunAroundEachTimedRoundOnly) {
  std::vector<std::string> events;
  const PairedRounds r = paired_rounds(
      [&] {
        events.push_back("a");
        return 1e-3;
      },
      [&] { return 1e-3; }, 3, [&] { events.push_back("begin"); },
      [&] { events.push_back("end"); });
  EXPECT_EQ(std::count(events.begin(), events.end(), "begin"), 3);
  EXPECT_EQ(std::count(events.begin(), events.end(), "end"), 3);
  // the two sizing runs come before the first round begins
  EXPECT_EQ(events[0], "a");
  EXPECT_EQ(events[1], "a");
  EXPECT_EQ(events[2], "begin");
  EXPECT_EQ(events.back(), "end");
  EXPECT_EQ(r.first_seconds.size(), 3u);
}

TEST(PairedRounds, ASuitesRoundsSettingIsEveryComparisonsDefault) {
  EXPECT_EQ(interleaved_rounds(), kInterleavedRounds);
  EXPECT_THROW(set_interleaved_rounds(5), std::invalid_argument);  // no 95 % interval below 6
  EXPECT_EQ(interleaved_rounds(), kInterleavedRounds);
  set_interleaved_rounds(7);
  const PairedRounds r = paired_rounds([] { return 1e-3; }, [] { return 1e-3; });
  const CopyShareRounds share = copy_share_rounds([] { return 1e-3; }, 4096, 1);
  set_interleaved_rounds(kInterleavedRounds);
  EXPECT_EQ(r.first_seconds.size(), 7u);
  EXPECT_EQ(share.share.n, 7);
}

TEST(PairedRounds, AlternateRunByRunAndSwapWhoGoesFirstEachRound) {
  std::string order;
  const PairedRounds r = paired_rounds(
      [&] {
        order += 'a';
        return 0.016;
      },
      [&] {
        order += 'b';
        return 0.016;
      },
      3);
  // 2 untimed runs of each size the rounds: 32 ms a pair, 2 pairs for 40 ms
  EXPECT_EQ(r.pairs_per_round, 2);
  std::string untimed = order.substr(0, 4);
  std::sort(untimed.begin(), untimed.end());
  EXPECT_EQ(untimed, "aabb");
  EXPECT_EQ(order.substr(4), "abbabaababba");
  ASSERT_EQ(r.first_seconds.size(), 3u);
  EXPECT_DOUBLE_EQ(r.first_seconds[0], 0.016);
  EXPECT_DOUBLE_EQ(r.second_seconds[2], 0.016);
}

void expect_replayed(const std::string& where, const nlohmann::json& dump) {
  SCOPED_TRACE(where);
  const double traffic = dump.at("traffic_bytes");
  const std::int64_t copied = dump.at("copied_bytes");
  const auto kernel = dump.at("kernel_seconds").get<std::vector<double>>();
  const auto copy = dump.at("copy_seconds").get<std::vector<double>>();
  ASSERT_EQ(kernel.size(), copy.size());
  std::vector<double> shares;
  for (std::size_t i = 0; i < kernel.size(); ++i)
    shares.push_back(round_share(traffic, kernel[i], copied, copy[i]));
  const MedianInterval m = median_interval(shares);
  const auto& recorded = dump.at("share");
  EXPECT_EQ(m.n, recorded.at("rounds").get<int>());
  EXPECT_NEAR(m.median, recorded.at("median").get<double>(), 1e-12);
  EXPECT_NEAR(m.low, recorded.at("low").get<double>(), 1e-12);
  EXPECT_NEAR(m.high, recorded.at("high").get<double>(), 1e-12);
}

TEST(CopyShareRounds, RecordedRoundsReplayToTheirIntervals) {
  std::ifstream in(FUSEBENCH_SHARE_ROUNDS_FIXTURE);
  ASSERT_TRUE(in) << FUSEBENCH_SHARE_ROUNDS_FIXTURE;
  const nlohmann::json fixture = nlohmann::json::parse(in);
  int replayed = 0;
  for (const auto& [run, dumps] : fixture.at("runs").items()) {
    for (const auto& [name, dump] : dumps.items()) {
      expect_replayed(run + " " + name, dump);
      ++replayed;
    }
  }
  for (const auto& [name, dump] : fixture.at("constructed").items()) {
    expect_replayed("constructed " + name, dump);
    ++replayed;
  }
  EXPECT_GE(replayed, 10);
}

}  // namespace
}  // namespace fusebench::suite
