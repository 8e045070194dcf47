#include "trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <sstream>

#include "fusebench/error.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/npy.hpp"
#include "fusebench/rng.hpp"

namespace fusebench::training {

using nlohmann::json;

namespace {
constexpr std::uint64_t kInitStream = 0x1417;  // Philox streams: weights, data order
constexpr std::uint64_t kDataStream = 0xda7a;
constexpr char kCheckpointMagic[8] = {'F', 'B', 'T', 'R', 'A', 'I', 'N', '1'};

template <class T>
T get(const json& j, const char* key, const std::filesystem::path& file, T fallback,
      bool required = false) {
  if (!j.contains(key)) {
    if (required) throw_input_error("config {}: missing key '{}'", file.string(), key);
    return fallback;
  }
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    throw_input_error("config {}: key '{}' has the wrong type ({})", file.string(), key, e.what());
  }
}
}  // namespace

// ---- configuration
TrainConfig TrainConfig::load(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw_input_error("config {}: cannot be read (missing file?)", path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw_input_error("config {}: malformed JSON ({})", path.string(), e.what());
  }
  if (!j.is_object())
    throw_input_error("config {}: the top level must be an object", path.string());
  static const std::vector<std::string> known = {"name",
                                                 "model",
                                                 "batch",
                                                 "steps",
                                                 "quick_steps",
                                                 "lr",
                                                 "min_lr_fraction",
                                                 "warmup_steps",
                                                 "weight_decay",
                                                 "beta1",
                                                 "beta2",
                                                 "adam_eps",
                                                 "grad_clip",
                                                 "log_every",
                                                 "eval_batches",
                                                 "loss_scale",
                                                 "loss_scale_growth_interval",
                                                 "data_files",
                                                 "eval_fraction",
                                                 "seeds",
                                                 "comment"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw_input_error("config {}: unknown key '{}'", path.string(), key);
    }
  }
  TrainConfig c;
  c.name = get<std::string>(j, "name", path, "", true);
  if (!j.contains("model") || !j["model"].is_object())
    throw_input_error("config {}: missing object 'model'", path.string());
  const json& m = j["model"];
  c.model.vocab = get<int>(m, "vocab", path, 256);
  c.model.layers = get<int>(m, "layers", path, 0, true);
  c.model.heads = get<int>(m, "heads", path, 0, true);
  c.model.width = get<int>(m, "width", path, 0, true);
  c.model.context = get<int>(m, "context", path, 0, true);
  if (c.model.vocab != 256)
    throw_input_error("config {}: model.vocab must be 256 (byte-level tokens), got {}",
                      path.string(), c.model.vocab);
  c.batch = get<int>(j, "batch", path, 0, true);
  c.steps = get<int>(j, "steps", path, 0, true);
  c.quick_steps = get<int>(j, "quick_steps", path, c.steps);
  c.lr = get<double>(j, "lr", path, c.lr);
  c.min_lr_fraction = get<double>(j, "min_lr_fraction", path, c.min_lr_fraction);
  c.warmup_steps = get<int>(j, "warmup_steps", path, c.warmup_steps);
  c.weight_decay = get<double>(j, "weight_decay", path, c.weight_decay);
  c.beta1 = get<double>(j, "beta1", path, c.beta1);
  c.beta2 = get<double>(j, "beta2", path, c.beta2);
  c.adam_eps = get<double>(j, "adam_eps", path, c.adam_eps);
  c.grad_clip = get<double>(j, "grad_clip", path, c.grad_clip);
  c.log_every = get<int>(j, "log_every", path, c.log_every);
  c.eval_batches = get<int>(j, "eval_batches", path, c.eval_batches);
  c.loss_scale = get<double>(j, "loss_scale", path, c.loss_scale);
  c.loss_scale_growth_interval =
      get<int>(j, "loss_scale_growth_interval", path, c.loss_scale_growth_interval);
  c.data_files = get<std::vector<std::string>>(j, "data_files", path, {}, true);
  c.eval_fraction = get<double>(j, "eval_fraction", path, c.eval_fraction);
  c.seeds = get<std::vector<std::uint64_t>>(j, "seeds", path, c.seeds);
  auto positive = [&](const char* key, double v) {
    if (!(v > 0))
      throw_input_error("config {}: '{}' must be positive, got {}", path.string(), key, v);
  };
  positive("batch", c.batch);
  positive("steps", c.steps);
  positive("quick_steps", c.quick_steps);
  positive("lr", c.lr);
  positive("log_every", c.log_every);
  positive("eval_batches", c.eval_batches);
  positive("loss_scale", c.loss_scale);
  positive("loss_scale_growth_interval", c.loss_scale_growth_interval);
  positive("grad_clip", c.grad_clip);
  if (c.warmup_steps < 0)
    throw_input_error("config {}: 'warmup_steps' must be >= 0", path.string());
  if (!(c.eval_fraction > 0 && c.eval_fraction < 1))
    throw_input_error("config {}: 'eval_fraction' must lie in (0, 1)", path.string());
  if (!(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1))
    throw_input_error("config {}: betas must lie in [0, 1)", path.string());
  if (c.data_files.empty()) throw_input_error("config {}: 'data_files' is empty", path.string());
  if (c.seeds.empty()) throw_input_error("config {}: 'seeds' is empty", path.string());
  try {
    parameter_layout(c.model);
  } catch (const InputError& e) {
    throw_input_error("config {}: {}", path.string(), e.what());
  }
  return c;
}

json TrainConfig::to_json() const {
  return {{"name", name},
          {"model",
           {{"vocab", model.vocab},
            {"layers", model.layers},
            {"heads", model.heads},
            {"width", model.width},
            {"context", model.context}}},
          {"parameters", parameter_count(parameter_layout(model))},
          {"batch", batch},
          {"steps", steps},
          {"quick_steps", quick_steps},
          {"lr", lr},
          {"min_lr_fraction", min_lr_fraction},
          {"warmup_steps", warmup_steps},
          {"weight_decay", weight_decay},
          {"beta1", beta1},
          {"beta2", beta2},
          {"adam_eps", adam_eps},
          {"grad_clip", grad_clip},
          {"log_every", log_every},
          {"eval_batches", eval_batches},
          {"loss_scale", loss_scale},
          {"loss_scale_growth_interval", loss_scale_growth_interval},
          {"data_files", data_files},
          {"eval_fraction", eval_fraction},
          {"seeds", seeds}};
}

// ---- data
Dataset Dataset::load(const TrainConfig& config) {
  Dataset d;
  std::vector<std::uint8_t> all;
  for (const auto& file : config.data_files) {
    std::ifstream in(file, std::ios::binary);
    if (!in)
      throw_input_error(
          "data file {} cannot be read (missing? tools/bootstrap installs Debian's 'fortunes')",
          file);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    if (bytes.empty()) throw_input_error("data file {} is empty", file);
    all.insert(all.end(), bytes.begin(), bytes.end());
    d.files.push_back(file);
  }
  const std::size_t eval_size = std::size_t(double(all.size()) * config.eval_fraction);
  const std::size_t need = std::size_t(config.model.context) + 2;
  if (all.size() - eval_size < need || eval_size < need) {
    throw_input_error("data: {} bytes are too few for context {} with eval fraction {}", all.size(),
                      config.model.context, config.eval_fraction);
  }
  d.train.assign(all.begin(), all.end() - std::ptrdiff_t(eval_size));
  d.eval.assign(all.end() - std::ptrdiff_t(eval_size), all.end());
  return d;
}

json Dataset::describe() const {
  return {{"files", files},
          {"train_tokens", train.size()},
          {"eval_tokens", eval.size()},
          {"tokenizer", "bytes (vocab 256)"}};
}

DType activation_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "f16") return DType::f16;
  throw_input_error("dtype '{}' is not one of f32, bf16, f16", name);
}

// ---- trainer
Trainer::Trainer(TrainConfig config, const Dataset& data, const engine::Device& device, bool fused,
                 DType activations, std::uint64_t seed, engine::EngineOptions options)
    : config_(std::move(config)),
      data_(data),
      fused_(fused),
      act_(activations),
      seed_(seed),
      executor_(fused ? device.fused(options) : device.eager(options)),
      layout_(parameter_layout(config_.model)),
      train_(build_train_graph(config_.model, config_.batch, activations, true)),
      eval_(build_train_graph(config_.model, config_.batch, activations, false)) {
  const std::int64_t n = parameter_count(layout_);
  adamw_ =
      build_adamw_graph(n, config_.beta1, config_.beta2, config_.adam_eps, config_.weight_decay);
  norm_ = build_sum_of_squares_graph(n);
  param_ = Tensor(DType::f32, {n});
  m_ = Tensor(DType::f32, {n});
  v_ = Tensor(DType::f32, {n});
  decay_mask_ = Tensor(DType::f32, {n});
  auto p = param_.span<float>();
  auto mask = decay_mask_.span<float>();
  // Initial weights from (seed, slot): the same in every mode.
  for (std::size_t s = 0; s < layout_.size(); ++s) {
    const auto& slot = layout_[s];
    const Tensor init =
        random_normal(DType::f32, {slot.numel}, 0.0, slot.stddev, seed, kInitStream + s);
    for (std::int64_t i = 0; i < slot.numel; ++i) {
      const std::size_t k = std::size_t(slot.offset + i);
      p[k] = slot.init == ParameterSlot::Init::Normal ? init.span<float>()[std::size_t(i)]
             : slot.init == ParameterSlot::Init::One  ? 1.0f
                                                      : 0.0f;
      mask[k] = slot.decay ? 1.0f : 0.0f;
    }
  }
  loss_scale_ = activations == DType::f16 ? config_.loss_scale : 1.0;
  tokens_ = Tensor(DType::i32, {tokens_per_step()});
  targets_ = Tensor(DType::f32, {tokens_per_step(), config_.model.vocab});
}

double Trainer::lr_at(int step) const {
  // linear warm-up to lr, then a cosine down to lr * min_lr_fraction at the last step
  if (step < config_.warmup_steps)
    return config_.lr * double(step + 1) / double(config_.warmup_steps);
  const double span = std::max(1, config_.steps - config_.warmup_steps);
  const double progress = std::min(1.0, double(step - config_.warmup_steps) / span);
  const double min_lr = config_.lr * config_.min_lr_fraction;
  return min_lr + 0.5 * (config_.lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

void Trainer::fill_batch(const std::vector<std::uint8_t>& text,
                         const std::vector<std::int64_t>& starts) {
  const std::int64_t t = config_.model.context, v = config_.model.vocab;
  auto tok = tokens_.span<std::int32_t>();
  auto tgt = targets_.span<float>();
  std::fill(tgt.begin(), tgt.end(), 0.0f);
  for (std::size_t b = 0; b < starts.size(); ++b) {
    for (std::int64_t i = 0; i < t; ++i) {
      const std::int64_t row = std::int64_t(b) * t + i;
      tok[std::size_t(row)] = text[std::size_t(starts[b] + i)];
      tgt[std::size_t(row * v + text[std::size_t(starts[b] + i + 1)])] = 1.0f;
    }
  }
}

namespace {
// Inputs that are views of the flat master vector, one per parameter slot.
void bind_parameters(engine::Inputs& in, const std::vector<ParameterSlot>& layout,
                     const Tensor& flat) {
  for (const auto& slot : layout)
    in[slot.name] = flat.slice(0, slot.offset, slot.offset + slot.numel).reshape(slot.shape);
}
Tensor scalar_tensor(double v) {
  return Tensor::from_values<float>({1}, std::vector<float>{float(v)});
}
}  // namespace

void Trainer::account(const engine::RunResult& result, double wall_ms) {
  double kernels_ms = 0;
  for (const auto& k : result.trace) {
    kernels_ms += k.run_ms;
    kind_ms_[k.kind.empty() ? "unknown" : k.kind] += k.run_ms;
    kernel_ms_[k.name + " [" + (k.ops.empty() ? std::string() : k.ops.back()) + "]"] += k.run_ms;
  }
  // The executor's own time around its kernels: planning, emission and kernel lookup (fused),
  // allocation and operand conversion (both).
  kind_ms_["executor_overhead"] += std::max(0.0, wall_ms - kernels_ms);
}

engine::RunResult Trainer::timed_run(const engine::Graph& graph, const engine::Inputs& inputs) {
  const auto start = std::chrono::steady_clock::now();
  engine::RunResult result = executor_->run(graph, inputs);
  account(
      result,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return result;
}

StepRecord Trainer::step() {
  StepRecord rec;
  rec.step = step_ + 1;
  // ---- data: the same positions in every mode, from (seed, step)
  const CounterRng rng(seed_, kDataStream);
  std::vector<std::int64_t> starts;
  const std::uint64_t range = data_.train.size() - std::size_t(config_.model.context) - 1;
  for (int b = 0; b < config_.batch; ++b) {
    starts.push_back(std::int64_t(
        rng.u64(std::uint64_t(step_) * std::uint64_t(config_.batch) + std::uint64_t(b)) % range));
  }
  fill_batch(data_.train, starts);
  // ---- forward and backward
  engine::Inputs in;
  bind_parameters(in, layout_, param_);
  in["tokens"] = tokens_;
  in["targets"] = targets_;
  in["loss_seed"] = scalar_tensor(loss_scale_);
  const engine::RunResult fb = timed_run(train_.graph, in);
  rec.train_loss = fb.outputs[0].value_at(0);
  Tensor grad(DType::f32, {param_.numel()});
  for (std::size_t s = 0; s < layout_.size(); ++s) {
    const Tensor g = fb.outputs[s + 1].contiguous();
    std::memcpy(grad.span<float>().data() + layout_[s].offset, g.span<float>().data(),
                std::size_t(layout_[s].numel) * sizeof(float));
  }
  const engine::RunResult norm = timed_run(norm_, {{"grad", grad}});
  const double sum_sq = norm.outputs[0].value_at(0);
  rec.loss_scale = loss_scale_;
  rec.lr = lr_at(step_);
  if (!std::isfinite(sum_sq)) {
    // fp16 overflow (or a diverged run): no update; the dynamic loss scale halves
    rec.skipped = true;
    rec.grad_norm = std::numeric_limits<double>::infinity();
    // Evidence: the first materialised node, in graph order, that holds a non-finite value.
    for (const engine::Node& n : train_.graph.nodes()) {
      const auto it = fb.values.find(n.id);
      if (n.kind == engine::OpKind::Input || it == fb.values.end()) continue;
      if (n.kind == engine::OpKind::CausalMask && std::isinf(n.scalar)) continue;  // -inf by design
      const Tensor values = it->second.to(DType::f64).contiguous();
      const auto v = values.span<double>();
      if (std::any_of(v.begin(), v.end(), [](double x) { return !std::isfinite(x); })) {
        // "sum277=sum f16[384] of concat276=concat f16[512, 384]": the node and what it reduces or maps
        const engine::Node& in = train_.graph.node(n.inputs[0]);
        rec.overflow_node =
            fmt::format("{}={} {}{} of {}={} {}{}", n.name, engine::op_name(n.kind),
                        dtype_name(n.dtype), shape_string(n.shape), in.name,
                        engine::op_name(in.kind), dtype_name(in.dtype), shape_string(in.shape));
        break;
      }
    }
    if (act_ == DType::f16) {
      loss_scale_ /= 2;
      good_steps_ = 0;
    }
    ++step_;
    return rec;
  }
  rec.grad_norm = std::sqrt(sum_sq) / loss_scale_;
  const double clip = std::min(1.0, config_.grad_clip / (rec.grad_norm + 1e-6));
  ++adam_steps_;
  engine::Inputs opt = {
      {"param", param_},
      {"grad", grad},
      {"m", m_},
      {"v", v_},
      {"decay_mask", decay_mask_},
      {"lr", scalar_tensor(rec.lr)},
      {"grad_scale", scalar_tensor(clip / loss_scale_)},
      {"inv_bias1", scalar_tensor(1.0 / (1.0 - std::pow(config_.beta1, adam_steps_)))},
      {"inv_bias2", scalar_tensor(1.0 / (1.0 - std::pow(config_.beta2, adam_steps_)))}};
  const engine::RunResult up = timed_run(adamw_, opt);
  param_ = up.outputs[0].contiguous();
  m_ = up.outputs[1].contiguous();
  v_ = up.outputs[2].contiguous();
  if (act_ == DType::f16 && ++good_steps_ >= config_.loss_scale_growth_interval) {
    loss_scale_ *= 2;
    good_steps_ = 0;
  }
  ++step_;
  return rec;
}

double Trainer::evaluate() {
  // Fixed batches spread evenly over the eval text: the same in every run.
  const std::int64_t range = std::int64_t(data_.eval.size()) - config_.model.context - 1;
  const int total = config_.eval_batches * config_.batch;
  double sum = 0;
  for (int e = 0; e < config_.eval_batches; ++e) {
    std::vector<std::int64_t> starts;
    for (int b = 0; b < config_.batch; ++b)
      starts.push_back(range * std::int64_t(e * config_.batch + b) / total);
    fill_batch(data_.eval, starts);
    engine::Inputs in;
    bind_parameters(in, layout_, param_);
    in["tokens"] = tokens_;
    in["targets"] = targets_;
    sum += executor_->run(eval_.graph, in).outputs[0].value_at(0);
  }
  return sum / config_.eval_batches;
}

// ---- checkpoints
void Trainer::save(const std::filesystem::path& path) const {
  const json header = {{"config", config_.name},
                       {"parameters", param_.numel()},
                       {"step", step_},
                       {"adam_steps", adam_steps_},
                       {"good_steps", good_steps_},
                       {"loss_scale", loss_scale_},
                       {"seed", seed_},
                       {"dtype", dtype_name(act_)},
                       {"mode", fused_ ? "fused" : "eager"}};
  const std::string text = header.dump();
  std::string bytes(kCheckpointMagic, sizeof kCheckpointMagic);
  const std::uint64_t length = text.size();
  bytes.append(reinterpret_cast<const char*>(&length), sizeof length);
  bytes += text;
  for (const Tensor* t : {&param_, &m_, &v_})
    bytes.append(reinterpret_cast<const char*>(t->raw_data()), t->nbytes());
  write_file_atomically(path, std::string_view(bytes));
}

namespace {
// Reads the magic and the JSON header; leaves `in` at the first tensor byte.
CheckpointHeader read_header(std::ifstream& in, const std::filesystem::path& path) {
  if (!in) throw_input_error("checkpoint {} cannot be read", path.string());
  char magic[8];
  std::uint64_t length = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kCheckpointMagic, 8) != 0 ||
      !in.read(reinterpret_cast<char*>(&length), 8) || length > (1u << 20)) {
    throw_input_error("checkpoint {}: not a fusebench training checkpoint", path.string());
  }
  std::string text(length, '\0');
  in.read(text.data(), std::streamsize(length));
  CheckpointHeader header;
  try {
    const json j = json::parse(text);
    header.config = j.at("config").get<std::string>();
    header.dtype = j.at("dtype").get<std::string>();
    header.mode = j.at("mode").get<std::string>();
    header.seed = j.at("seed").get<std::uint64_t>();
    header.parameters = j.at("parameters").get<std::int64_t>();
    header.step = j.at("step").get<int>();
    header.adam_steps = j.at("adam_steps").get<int>();
    header.good_steps = j.at("good_steps").get<int>();
    header.loss_scale = j.at("loss_scale").get<double>();
  } catch (const json::exception&) {
    throw_input_error("checkpoint {}: malformed header", path.string());
  }
  return header;
}
}  // namespace

CheckpointHeader read_checkpoint_header(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return read_header(in, path);
}

void Trainer::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const CheckpointHeader header = read_header(in, path);
  if (header.parameters != param_.numel() || header.config != config_.name ||
      header.dtype != dtype_name(act_)) {
    throw_input_error(
        "checkpoint {}: written for config {} / dtype {} / {} parameters, not {} / {} / {}",
        path.string(), header.config, header.dtype, header.parameters, config_.name,
        dtype_name(act_), param_.numel());
  }
  // The seed fixes the batch order from the checkpoint's step on, and the mode is the run's
  // subject: a resume under either changed would continue a different run without saying so.
  const std::string mode = fused_ ? "fused" : "eager";
  if (header.seed != seed_ || header.mode != mode) {
    throw_input_error(
        "checkpoint {}: written by a {} run with seed {}, not {} with seed {} (a resume continues "
        "the "
        "checkpoint's run: same mode, same data order)",
        path.string(), header.mode, header.seed, mode, seed_);
  }
  for (Tensor* t : {&param_, &m_, &v_}) {
    *t = Tensor::uninitialized(DType::f32, {param_.numel()});
    if (!in.read(reinterpret_cast<char*>(t->raw_data()), std::streamsize(t->nbytes()))) {
      throw_input_error("checkpoint {}: truncated", path.string());
    }
  }
  step_ = header.step;
  adam_steps_ = header.adam_steps;
  good_steps_ = header.good_steps;
  loss_scale_ = header.loss_scale;
}

// ---- a whole run
RunOutcome train_run(const TrainConfig& config, const Dataset& data, const RunSpec& spec) {
  if (spec.steps < 1) throw_input_error("run: steps must be positive, got {}", spec.steps);
  const auto device = engine::make_device(spec.device);
  if (const std::string why = device->unavailable_reason(); !why.empty()) {
    throw_input_error("device {} cannot run here: {}", spec.device, why);
  }
  engine::EngineOptions options = spec.options;
  options.threads = spec.threads;
  Trainer trainer(config, data, *device, spec.fused, spec.activations, spec.seed, options);
  if (!spec.resume.empty()) trainer.load(spec.resume);
  RunOutcome out;
  std::string csv =
      "step,train_loss,eval_loss,perplexity,grad_norm,lr,loss_scale,skipped,overflow_node\n";
  const auto run_start = std::chrono::steady_clock::now();
  auto last_print = run_start - std::chrono::seconds(10);
  double timed_s = 0;
  std::int64_t timed_tokens = 0;
  const int first = trainer.steps_done();
  const int last = first + spec.steps;
  while (trainer.steps_done() < last) {
    const auto t0 = std::chrono::steady_clock::now();
    StepRecord rec = trainer.step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rec.step == first + 1) {
      out.first_step_s = dt;
      trainer.reset_timing();  // the breakdown covers the steady steps
    } else {
      timed_s += dt;
      timed_tokens += trainer.tokens_per_step();
      out.step_s.push_back(dt);
    }
    out.losses.push_back(rec.train_loss);
    if (rec.skipped) {
      out.skipped.emplace_back(rec.step, rec.overflow_node);
      fmt::print(stderr,
                 "  {}: step {} skipped (non-finite gradient; first non-finite node {}), loss "
                 "scale {} -> halved\n",
                 spec.label, rec.step, rec.overflow_node.empty() ? "?" : rec.overflow_node,
                 rec.loss_scale);
    }
    if (rec.step % spec.csv_every == 0 || rec.step == last || rec.step == first + 1) {
      rec.eval_loss = trainer.evaluate();
      out.rows.push_back(rec);
      csv += fmt::format("{},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{},{},{}\n", rec.step,
                         rec.train_loss, rec.eval_loss, std::exp(rec.eval_loss), rec.grad_norm,
                         rec.lr, rec.loss_scale, rec.skipped ? 1 : 0, rec.overflow_node);
      if (spec.stop_after_row && spec.stop_after_row(rec, out.rows.size() - 1)) {
        out.stopped_at_step = rec.step;
        fmt::print(stderr, "  {}: stopped after step {} (its row decides the run)\n", spec.label,
                   rec.step);
        break;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_print > std::chrono::seconds(3) || rec.step == last) {
      last_print = now;
      const double rate = timed_s > 0 ? double(timed_tokens) / timed_s : 0;
      const double eta =
          rate > 0 ? double(last - rec.step) * double(trainer.tokens_per_step()) / rate : 0;
      fmt::print(stderr,
                 "  {}: step {}/{} loss {:.4f} grad-norm {:.3f} {:.0f} tokens/s ETA {:.0f} s\n",
                 spec.label, rec.step, last, rec.train_loss, rec.grad_norm, rate, eta);
    }
  }
  out.train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  out.tokens_per_s = timed_s > 0 ? double(timed_tokens) / timed_s : 0;
  const int steady = std::max(1, trainer.steps_done() - first - 1);
  for (const auto& [kind, ms] : trainer.kind_ms()) out.kind_ms[kind] = ms / steady;
  for (const auto& [kernel, ms] : trainer.kernel_ms()) out.kernel_ms[kernel] = ms / steady;
  if (!spec.checkpoint.empty()) trainer.save(spec.checkpoint);
  if (!spec.csv.empty()) {
    if (spec.csv.has_parent_path()) std::filesystem::create_directories(spec.csv.parent_path());
    write_file_atomically(spec.csv, std::string_view(csv));
  }
  return out;
}

InterleavedTiming interleaved_timing(const TrainConfig& config, const Dataset& data,
                                     const RunSpec& spec, int rounds, int timed_steps,
                                     bool control) {
  if (rounds < 1 || timed_steps < 1) {
    throw_input_error("interleaved timing: rounds and timed steps must be positive, got {} and {}",
                      rounds, timed_steps);
  }
  const auto device = engine::make_device(spec.device);
  if (const std::string why = device->unavailable_reason(); !why.empty()) {
    throw_input_error("device {} cannot run here: {}", spec.device, why);
  }
  engine::EngineOptions options;
  options.threads = spec.threads;
  Trainer eager(config, data, *device, false, spec.activations, spec.seed, options);
  Trainer fused(config, data, *device, !control, spec.activations, spec.seed, options);
  eager.step();
  fused.step();
  InterleavedTiming out;
  out.rounds = rounds;
  out.timed_steps = timed_steps;
  fmt::print(stderr,
             "  {}: {} rounds of a turn each of eager and {} ({} timed steps after one untimed), "
             "interleaved\n",
             spec.label, rounds, control ? "a second eager trainer" : "fused", timed_steps);
  auto turn = [&](Trainer& trainer, InterleavedTiming::Mode& mode, int round) {
    auto timed_step = [&](bool& skipped) {
      const auto t0 = std::chrono::steady_clock::now();
      skipped = trainer.step().skipped;
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    bool skipped = false;
    mode.turn_first_step_s.push_back(timed_step(skipped));
    trainer.reset_timing();
    std::vector<double> steps;
    for (int s = 0; s < timed_steps; ++s) {
      const double dt = timed_step(skipped);
      if (skipped) {
        mode.skipped_rounds.push_back(round);
      } else {
        steps.push_back(dt);
      }
    }
    mode.step_s.insert(mode.step_s.end(), steps.begin(), steps.end());
    mode.step_round.insert(mode.step_round.end(), steps.size(), round);
    mode.turn_median_s.push_back(steps.empty() ? NAN : percentile(steps, 0.5));
    for (const auto& [kind, ms] : trainer.kind_ms()) mode.kind_ms[kind] += ms;
    trainer.reset_timing();
  };
  for (int r = 0; r < rounds; ++r) {
    if (r % 2 == 0) {
      turn(eager, out.eager, r);
      turn(fused, out.fused, r);
    } else {
      turn(fused, out.fused, r);
      turn(eager, out.eager, r);
    }
  }
  for (InterleavedTiming::Mode* mode : {&out.eager, &out.fused}) {
    for (auto& [kind, ms] : mode->kind_ms) ms /= double(rounds) * timed_steps;
  }
  return out;
}

}  // namespace fusebench::training
