// Task E's trainer: a GPT-2-style model (gpt2_graph.hpp) trained with AdamW on byte-level English
// text, every step run as engine graphs by one device's eager or fused executor. Eager and fused
// runs of one seed see the same data in the same order, the same initial weights and the same
// schedule: they differ only by how the executor evaluates the graphs.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusebench/engine/executor.hpp"
#include "gpt2_graph.hpp"

namespace fusebench::training {

// ---- configuration (a small JSON file: see configs/*.json)
struct TrainConfig {
  std::string name;
  ModelShape model;
  int batch = 4;
  int steps = 1000;                         // the full run
  int quick_steps = 60;                     // the quick profile's shortened run
  double lr = 1e-3, min_lr_fraction = 0.1;  // cosine from lr down to lr * min_lr_fraction
  int warmup_steps = 50;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8, grad_clip = 1.0;
  int log_every = 50;  // CSV rows (with an eval) every this many steps
  int eval_batches = 4;
  double loss_scale = 65536;  // fp16's initial dynamic loss scale
  int loss_scale_growth_interval = 200;
  std::vector<std::string> data_files;
  double eval_fraction = 0.1;  // the text's tail
  std::vector<std::uint64_t> seeds = {1, 2, 3};

  // Reads and validates `path`: InputError naming the file and the key on anything wrong.
  static TrainConfig load(const std::filesystem::path& path);
  nlohmann::json to_json() const;
};

// The text, byte-level tokens: the concatenated files, the last eval_fraction for evaluation.
struct Dataset {
  std::vector<std::uint8_t> train, eval;
  std::vector<std::string> files;
  static Dataset load(const TrainConfig& config);  // InputError naming a missing or empty file
  nlohmann::json describe() const;                 // files, token counts
};

// dtype names of the activations: "f32", "bf16", "f16" (InputError naming anything else).
DType activation_dtype(const std::string& name);

struct StepRecord {
  int step = 0;           // 1-based: after this many steps
  double train_loss = 0;  // the step's batch loss (before the update)
  double eval_loss = -1;  // -1 when not evaluated at this step
  double grad_norm = 0;   // global L2 norm of the unscaled gradient, before clipping
  double lr = 0;
  double loss_scale = 1;
  bool skipped = false;       // fp16 overflow: no update, the loss scale halved
  std::string overflow_node;  // when skipped: the first node (graph order) holding inf / NaN
};

// What a checkpoint fixes about the run it continues (its JSON header).
struct CheckpointHeader {
  std::string config, dtype, mode;  // mode: "eager" or "fused"
  std::uint64_t seed = 0;           // the batch order follows (seed, step)
  std::int64_t parameters = 0;
  int step = 0, adam_steps = 0, good_steps = 0;
  double loss_scale = 1;
};
// InputError naming the file when it is not a readable checkpoint.
CheckpointHeader read_checkpoint_header(const std::filesystem::path& path);

class Trainer {
 public:
  Trainer(TrainConfig config, const Dataset& data, const engine::Device& device, bool fused,
          DType activations, std::uint64_t seed, engine::EngineOptions options = {});

  StepRecord step();  // one training step (forward, backward, clip, AdamW)
  double evaluate();  // mean loss over the fixed eval batches
  int steps_done() const { return step_; }

  // Checkpoint: step counters, loss-scale state, params, m, v (temporary file, then rename).
  void save(const std::filesystem::path& path) const;
  // InputError naming the file on a mismatch: config, dtype, parameter count, seed or mode.
  void load(const std::filesystem::path& path);

  const std::vector<ParameterSlot>& layout() const { return layout_; }
  const Tensor& parameters() const { return param_; }
  // Executor time of the training steps so far by kernel kind (matmul, rowwise, reduction, indexed,
  // pointwise, copy), milliseconds; eager ops are binned by the kind of kernel they would be.
  const std::map<std::string, double>& kind_ms() const { return kind_ms_; }
  // The same by kernel (eager op or fused kernel, with its last op), for finding the slow ones.
  const std::map<std::string, double>& kernel_ms() const { return kernel_ms_; }
  void reset_timing() {
    kind_ms_.clear();
    kernel_ms_.clear();
  }
  std::int64_t tokens_per_step() const {
    return std::int64_t(config_.batch) * config_.model.context;
  }
  double lr_at(int step) const;

 private:
  void fill_batch(const std::vector<std::uint8_t>& text, const std::vector<std::int64_t>& starts);
  void account(const engine::RunResult& result, double wall_ms);
  engine::RunResult timed_run(const engine::Graph& graph, const engine::Inputs& inputs);

  TrainConfig config_;
  const Dataset& data_;
  bool fused_;
  DType act_;
  std::uint64_t seed_;
  std::unique_ptr<engine::Executor> executor_;
  std::vector<ParameterSlot> layout_;
  TrainGraph train_, eval_;
  engine::Graph adamw_, norm_;
  Tensor param_, m_, v_, decay_mask_, tokens_, targets_;
  int step_ = 0, adam_steps_ = 0, good_steps_ = 0;
  double loss_scale_ = 1;
  std::map<std::string, double> kind_ms_, kernel_ms_;
};

// A whole run: steps with CSV rows every `csv_every` steps (eval at each), progress on stderr,
// an optional checkpoint at the end. The CSV is written to a temporary file and renamed when done.
struct RunSpec {
  std::string device = "cpu";
  bool fused = false;
  DType activations = DType::bf16;
  std::uint64_t seed = 1;
  int steps = 0;
  int csv_every = 50;
  std::filesystem::path csv;         // empty: none
  std::filesystem::path checkpoint;  // written at the end when set
  std::filesystem::path resume;      // read before the first step when set
  std::string label;                 // progress prefix
  int threads = 2;
  // the executor's other knobs (an attribution rerun's switches); `threads` sets its thread count
  engine::EngineOptions options;
  // Called with each logged row and its index; true ends the run after that row (an attribution
  // rerun whose criterion already failed: the remaining steps cannot change its answer).
  std::function<bool(const StepRecord& row, std::size_t index)> stop_after_row;
};
struct RunOutcome {
  std::vector<StepRecord> rows;  // the CSV's rows
  int stopped_at_step = -1;      // where stop_after_row ended the run; -1: it ran every step
  std::vector<double> losses;    // every step's train loss
  // every overflow-skipped step, with its first non-finite node
  std::vector<std::pair<int, std::string>> skipped;
  double tokens_per_s = 0;     // steps after the first (which compiles), evals excluded
  std::vector<double> step_s;  // the time of each of those steps
  double first_step_s = 0;
  double train_s = 0;
  std::map<std::string, double> kind_ms;    // per step, steps after the first
  std::map<std::string, double> kernel_ms;  // per step, by kernel
};
RunOutcome train_run(const TrainConfig& config, const Dataset& data, const RunSpec& spec);

// Step times of an eager and a fused trainer of one seed, interleaved: every round, each mode takes
// a turn of one untimed step and then `timed_steps` timed ones, the order of the modes alternating
// from round to round; one untimed step of each comes first (fused compiles or loads its kernels
// there). Two runs one after the other each meet their own share of other work on a shared
// machine; in turns of a few steps a burst of load falls on both modes alike. The untimed first
// step of a turn refills the caches that the other mode's turn evicted (eager's working set is
// the larger, so timing it would count that against eager); its time is kept apart. A step skipped
// for an fp16 overflow (no optimizer update) is left out, its round noted (the rounds of the kept
// steps too), so that a per-round figure is taken from the steps each round kept.
// control: a second eager trainer takes fused's place (an A/A check: how far two identical
// trainers' step times differ when measured this way, the floor below which a speed-up is noise).
struct InterleavedTiming {
  struct Mode {
    std::vector<double> step_s;             // timed steps, in order
    std::vector<int> step_round;            // the round of each of step_s
    std::vector<double> turn_median_s;      // per round: the median of its timed steps
    std::vector<double> turn_first_step_s;  // per round: the untimed first step
    std::map<std::string, double> kind_ms;  // per timed step, by kernel kind
    std::vector<int> skipped_rounds;        // the round of each skipped timed step
  };
  Mode eager, fused;
  int rounds = 0, timed_steps = 0;
};
InterleavedTiming interleaved_timing(const TrainConfig& config, const Dataset& data,
                                     const RunSpec& spec, int rounds, int timed_steps,
                                     bool control = false);

}  // namespace fusebench::training
