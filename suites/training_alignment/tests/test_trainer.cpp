// The trainer on the tiny config: the loss falls in every mode, eager and fused agree in fp32,
// a resumed run continues bit for bit, and bad input is refused with exit 2 and no output.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cpu_device.hpp"
#include "fusebench/error.hpp"
#include "trainer.hpp"

namespace fusebench::training {
namespace {

const std::filesystem::path kConfigDir = FUSEBENCH_TRAINING_CONFIG_DIR;

struct Tiny {
  TrainConfig config = TrainConfig::load(kConfigDir / "tiny.json");
  Dataset data = Dataset::load(config);
  std::unique_ptr<engine::Device> device = [] {
    cpu::register_cpu_device();
    return engine::make_device("cpu");
  }();
  std::vector<double> losses(bool fused, DType dtype, int steps) {
    Trainer trainer(config, data, *device, fused, dtype, config.seeds[0]);
    std::vector<double> out;
    for (int i = 0; i < steps; ++i) out.push_back(trainer.step().train_loss);
    return out;
  }
};

// Eager in both 16-bit dtypes, fused in bf16 (each fused dtype compiles its own ~100 kernels,
// minutes on a cold kernel cache; the suite's quick run trains fused f16 too).
TEST(Trainer, TinyConfigLossFalls) {
  Tiny tiny;
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (bool fused : {false, true}) {
      if (fused && dtype == DType::f16) continue;
      const auto losses = tiny.losses(fused, dtype, tiny.config.steps);
      ASSERT_NEAR(losses.front(), std::log(256.0), 0.3)
          << "initial loss is that of a near-uniform prediction";
      EXPECT_LT(losses.back(), losses.front() - 0.5)
          << dtype_name(dtype) << (fused ? " fused" : " eager");
    }
  }
}

// The control: in fp32 both modes compute every op in fp32 with the same per-element math; the
// losses agree to about 1e-6 relative over the first steps.
TEST(Trainer, EagerAndFusedAgreeInFp32) {
  Tiny tiny;
  const auto eager = tiny.losses(false, DType::f32, 4);
  const auto fused = tiny.losses(true, DType::f32, 4);
  for (std::size_t i = 0; i < eager.size(); ++i) {
    EXPECT_NEAR(fused[i], eager[i], 1e-6 * std::abs(eager[i])) << "step " << i + 1;
  }
}

// The speed comparison's interleaved turns (here the A/A control: two eager trainers, nothing to
// compile): every round gives each mode one untimed and `timed` timed steps, every timed step is
// kept (or counted as skipped), and zero rounds is refused by name.
TEST(Trainer, InterleavedTimingTakesTurnsAndKeepsEveryTimedStep) {
  Tiny tiny;
  RunSpec spec;
  spec.activations = DType::bf16;
  spec.seed = tiny.config.seeds[0];
  spec.label = "test";
  const int rounds = 3, timed = 2;
  const InterleavedTiming t = interleaved_timing(tiny.config, tiny.data, spec, rounds, timed, true);
  EXPECT_EQ(t.rounds, rounds);
  EXPECT_EQ(t.timed_steps, timed);
  for (const InterleavedTiming::Mode* mode : {&t.eager, &t.fused}) {
    EXPECT_EQ(mode->step_s.size() + mode->skipped_rounds.size(), std::size_t(rounds * timed));
    // every timed step, kept or skipped, says its round: `timed` of each round, in round order
    ASSERT_EQ(mode->step_round.size(), mode->step_s.size());
    std::vector<int> per_round(rounds, 0);
    for (int r : mode->step_round) ++per_round.at(std::size_t(r));
    for (int r : mode->skipped_rounds) ++per_round.at(std::size_t(r));
    EXPECT_EQ(per_round, std::vector<int>(rounds, timed));
    EXPECT_TRUE(std::is_sorted(mode->step_round.begin(), mode->step_round.end()));
    EXPECT_EQ(mode->turn_median_s.size(), std::size_t(rounds));
    EXPECT_EQ(mode->turn_first_step_s.size(), std::size_t(rounds));
    for (double s : mode->step_s) EXPECT_GT(s, 0);
    EXPECT_GT(mode->kind_ms.count("matmul"), 0u);
    // every kernel says what it computes (the executors' trace kind, not its name)
    for (const auto& [kind, ms] : mode->kind_ms) {
      EXPECT_TRUE(kind == "pointwise" || kind == "reduction" || kind == "rowwise" ||
                  kind == "matmul" || kind == "indexed" || kind == "copy" ||
                  kind == "executor_overhead")
          << kind;
    }
  }
  try {
    interleaved_timing(tiny.config, tiny.data, spec, 0, timed, true);
    ADD_FAILURE() << "zero rounds accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rounds"), std::string::npos) << e.what();
  }
}

// An attribution rerun ends at the row that decides it: the run stops after the row the callback
// accepts, says where, and keeps the rows up to it (the same rows as the whole run's).
TEST(Trainer, StopAfterRowEndsTheRunThere) {
  Tiny tiny;
  RunSpec spec;
  spec.activations = DType::bf16;
  spec.seed = tiny.config.seeds[0];
  spec.steps = 6;
  spec.csv_every = 1;
  spec.label = "test";
  const RunOutcome whole = train_run(tiny.config, tiny.data, spec);
  EXPECT_EQ(whole.stopped_at_step, -1);
  spec.stop_after_row = [](const StepRecord&, std::size_t index) { return index == 2; };
  const RunOutcome stopped = train_run(tiny.config, tiny.data, spec);
  ASSERT_EQ(stopped.rows.size(), 3u);
  EXPECT_EQ(stopped.stopped_at_step, stopped.rows.back().step);
  for (std::size_t r = 0; r < stopped.rows.size(); ++r)
    EXPECT_EQ(stopped.rows[r].eval_loss, whole.rows[r].eval_loss) << "row " << r;
}

TEST(Trainer, ResumeFromACheckpointIsBitIdentical) {
  Tiny tiny;
  const auto path =
      std::filesystem::temp_directory_path() / fmt::format("fusebench-e-ckpt-{}.bin", ::getpid());
  for (DType dtype : {DType::f16, DType::bf16}) {
    Trainer straight(tiny.config, tiny.data, *tiny.device, false, dtype, 7);
    std::vector<double> expected;
    for (int i = 0; i < 5; ++i) expected.push_back(straight.step().train_loss);
    {
      Trainer first(tiny.config, tiny.data, *tiny.device, false, dtype, 7);
      for (int i = 0; i < 3; ++i) first.step();
      first.save(path);
    }
    Trainer resumed(tiny.config, tiny.data, *tiny.device, false, dtype, 7);
    resumed.load(path);
    EXPECT_EQ(resumed.steps_done(), 3);
    for (int i = 3; i < 5; ++i) {
      const double loss = resumed.step().train_loss;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(loss),
                std::bit_cast<std::uint64_t>(expected[std::size_t(i)]))
          << dtype_name(dtype) << " step " << i + 1 << ": " << loss << " vs "
          << expected[std::size_t(i)];
    }
    const auto a = straight.parameters().span<float>(), b = resumed.parameters().span<float>();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size_bytes()), 0);
    // A trainer of another seed (another batch order) or mode would continue a different run.
    for (const auto& [fused, seed] :
         {std::pair{false, std::uint64_t(8)}, std::pair{true, std::uint64_t(7)}}) {
      Trainer other(tiny.config, tiny.data, *tiny.device, fused, dtype, seed);
      try {
        other.load(path);
        ADD_FAILURE() << "a checkpoint of eager seed 7 loaded into " << (fused ? "fused" : "eager")
                      << " seed " << seed;
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("eager run with seed 7"), std::string::npos)
            << e.what();
      }
    }
  }
  std::filesystem::remove(path);
}

// ---- bad input, through the command line: exit 2, a message naming the problem, no CSV
struct CliResult {
  int code;
  std::string err;
};
CliResult run_cli(const std::string& args) {
  const auto err_file =
      std::filesystem::temp_directory_path() / fmt::format("fusebench-e-err-{}.txt", ::getpid());
  const std::string cmd = fmt::format("{} --train {} 2> {} > /dev/null", FUSEBENCH_TRAINING_BINARY,
                                      args, err_file.string());
  const int status = std::system(cmd.c_str());
  std::ifstream in(err_file);
  std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_file);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, err};
}

// stdout's "loss <step> <hex>" lines of a --train run.
std::vector<std::string> cli_losses(const std::string& args) {
  const auto out_file =
      std::filesystem::temp_directory_path() / fmt::format("fusebench-e-out-{}.txt", ::getpid());
  const std::string cmd = fmt::format("{} --train {} > {} 2> /dev/null", FUSEBENCH_TRAINING_BINARY,
                                      args, out_file.string());
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out_file);
  std::vector<std::string> losses;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("loss ", 0) == 0) losses.push_back(line.substr(line.find(' ', 5) + 1));
  }
  std::filesystem::remove(out_file);
  return losses;
}

// A checkpoint fixes its run: --resume takes its seed (the batch order), mode and dtype, so a
// resume without those flags continues bit for bit, and a flag that contradicts one is refused.
TEST(Trainer, ResumeTakesTheCheckpointsSettingsAndRefusesConflictingFlags) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("fusebench-e-resume-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string tiny = "--config " + (kConfigDir / "tiny.json").string();
  const std::string ckpt = (dir / "seed5.ckpt").string();
  const auto straight = cli_losses(tiny + " --seed 5 --dtype f16 --steps 3");
  ASSERT_EQ(straight.size(), 3u);
  ASSERT_EQ(cli_losses(tiny + " --seed 5 --dtype f16 --steps 2 --checkpoint " + ckpt).size(), 2u);
  const auto resumed = cli_losses(tiny + " --resume " + ckpt + " --steps 1");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0], straight[2])
      << "a resume without --seed did not continue the checkpoint's data order";
  const auto csv = dir / "out.csv";
  for (const std::string flag : {"--seed 6", "--mode fused", "--dtype bf16"}) {
    const auto r =
        run_cli(tiny + " --resume " + ckpt + " " + flag + " --steps 1 --csv " + csv.string());
    EXPECT_EQ(r.code, 2) << flag << "\n" << r.err;
    EXPECT_NE(r.err.find(flag.substr(0, flag.find(' ')) + " " + flag.substr(flag.find(' ') + 1) +
                         " conflicts"),
              std::string::npos)
        << flag << "\n"
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(csv)) << flag;
  }
  // Flags that agree with the checkpoint are accepted.
  EXPECT_EQ(cli_losses(tiny + " --resume " + ckpt + " --seed 5 --mode eager --dtype f16 --steps 1"),
            resumed);
  std::filesystem::remove_all(dir);
}

TEST(Trainer, BadInputIsRefusedWithExit2AndNothingWritten) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("fusebench-e-bad-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const auto csv = dir / "out.csv";
  const std::string tiny = (kConfigDir / "tiny.json").string();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  std::string good_text;
  {
    std::ifstream in(tiny);
    good_text.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::string missing_data = good_text;
  missing_data.replace(missing_data.find("\"data_files\": ["), 15,
                       "\"data_files\": [\"/nonexistent/text.txt\", ");
  struct Case {
    std::string args, must_name;
  };
  const std::vector<Case> cases = {
      {"--config " + write("malformed.json", "{\"name\": \"x\", \"model\": {"), "malformed JSON"},
      {"--config " + (dir / "absent.json").string(), "absent.json"},
      {"--config " + write("nodata.json", missing_data), "/nonexistent/text.txt"},
      {"--config " +
           write("badkey.json", good_text.substr(0, good_text.rfind('}')) + ", \"lrr\": 1}"),
       "'lrr'"},
      {"--config " + tiny + " --device tpu9", "tpu9"},
      {"--config " + tiny + " --dtype f8", "'f8'"},
      {"--config " + tiny + " --mode lazy", "'lazy'"},
  };
  for (const auto& c : cases) {
    const auto r = run_cli(c.args + " --steps 1 --csv " + csv.string());
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.must_name), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(csv)) << c.args;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fusebench::training
