// Task B (claim §3.2): does fused execution accumulate no more error than eager, with fp64 as the
// truth? Chains: (1) mul -> add -> gelu -> mul, (2) layernorm, (3) softmax, (4) matmul -> add ->
// layernorm, (5) attention q k^T * scale -> softmax -> v. For each chain x dtype (f16, bf16; f32 as
// the floor control) x input distribution (U(-1, 1); N(0, 3^2) with 0.1 % outliers x 20), `sets`
// input sets from a fixed seed pool (seed per chain, Philox stream = set index) run three ways.
// Counters: ULP / abs / rel error at P50 / P99 / max over all elements of all sets, per path; the
// P50 / P99 / max of the per-set maxima; whether fused <= eager at P99 and max; counter-examples
// (sets where the fused max exceeds eager's); and the emulate-per-op-rounding control (ULP distance
// between fused-with-emulated-rounding and eager). Beside the ULP error, the conditioned error
// (|y - ref| in units of the fp64 reference's running error bound, docs/conditioned-error.md) at
// P50 / P99 / max per path, and counter-examples labelled well- or ill-conditioned. Per-set
// maxima, counter-examples (each with the first op where the fused error exceeds eager's) and the
// per-set figures of both paths (ULP and conditioned error, msprobe's metrics, the RMSE of
// torch._dynamo.utils.same; schema in docs/conditioned-error.md) go to the dump directory.
#include <array>
#include <fstream>
#include <map>
#include <thread>

#include "fusebench/compare.hpp"
#include "fusebench/engine/attribution.hpp"
#include "fusebench/engine/reference_ops.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/rng.hpp"
#include "support/case_attribution.hpp"
#include "support/cases.hpp"
#include "support/counterexample_rule.hpp"
#include "support/engine_support.hpp"
#include "support/localise.hpp"
#include "thread_pool.hpp"

namespace fusebench::suite {

namespace {
using engine::Graph;
using engine::NodeId;

struct Chain {
  std::string name;
  std::function<Graph(DType, bool quick)> build;
};

std::vector<Chain> chains() {
  return {
      {"mul_add_gelu_mul",
       [](DType d, bool quick) {
         Graph g;
         const Shape s = quick ? Shape{16, 256} : Shape{64, 1024};
         std::vector<NodeId> x;
         for (int i = 0; i < 4; ++i) x.push_back(g.input(fmt::format("x{}", i), s, d));
         g.mark_output(g.mul(g.gelu(g.add(g.mul(x[0], x[1]), x[2])), x[3]));
         return g;
       }},
      {"layernorm",
       [](DType d, bool quick) {
         Graph g;
         const Shape s = quick ? Shape{16, 256} : Shape{64, 1024};
         const auto x = g.input("x", s, d);
         const auto gamma = g.input("gamma", {s[1]}, d), beta = g.input("beta", {s[1]}, d);
         g.mark_output(g.layernorm(x, gamma, beta));
         return g;
       }},
      {"softmax",
       [](DType d, bool quick) {
         Graph g;
         const Shape s = quick ? Shape{16, 256} : Shape{64, 1024};
         g.mark_output(g.softmax(g.input("x", s, d)));
         return g;
       }},
      {"matmul_add_layernorm",
       [](DType d, bool quick) {
         Graph g;
         const std::int64_t m = quick ? 16 : 64, k = quick ? 128 : 512, n = quick ? 128 : 512;
         const auto x = g.input("x", {m, k}, d), w = g.input("w", {k, n}, d),
                    b = g.input("b", {n}, d);
         const auto gamma = g.input("gamma", {n}, d), beta = g.input("beta", {n}, d);
         g.mark_output(g.layernorm(g.add(g.matmul(x, w), b), gamma, beta));
         return g;
       }},
      {"attention",
       [](DType d, bool quick) {
         Graph g;
         const std::int64_t b = quick ? 2 : 4, s = quick ? 32 : 128, h = quick ? 32 : 64;
         const auto q = g.input("q", {b, s, h}, d), k = g.input("k", {b, s, h}, d),
                    v = g.input("v", {b, s, h}, d);
         const auto scores =
             g.mul_scalar(g.matmul(q, g.transpose(k, 1, 2)), 1.0 / std::sqrt(double(h)));
         g.mark_output(g.matmul(g.softmax(scores), v));
         return g;
       }},
  };
}

// Inputs of set `index`: U(-1, 1), or N(0, 3^2) with 0.1 % of the elements multiplied by 20.
engine::Inputs inputs_for(const Graph& g, bool heavy, std::uint64_t seed, std::uint64_t index) {
  engine::Inputs in;
  std::uint64_t k = 0;
  for (NodeId id : g.inputs()) {
    const auto& n = g.node(id);
    const std::uint64_t stream = index * 64 + k++;
    if (!heavy) {
      in[n.name] = random_uniform(n.dtype, n.shape, -1, 1, seed, stream);
      continue;
    }
    const Tensor base = random_normal(DType::f64, n.shape, 0, 3, seed, stream);
    const Tensor pick = random_uniform(DType::f64, n.shape, 0, 1, seed + 1, stream);
    Tensor mixed = base.clone();
    auto values = mixed.span<double>();
    const auto u = pick.span<double>();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] *= u[i] < 0.001 ? 20.0 : 1.0;
    in[n.name] = mixed.to(n.dtype);
  }
  return in;
}

Tensor concat_flat(const std::vector<Tensor>& parts) {
  std::int64_t total = 0;
  for (const auto& p : parts) total += p.numel();
  Tensor out = Tensor::uninitialized(parts.front().dtype(), {total});
  std::size_t offset = 0;
  for (const auto& p : parts) {
    std::memcpy(out.raw_data() + offset, p.raw_data(), p.nbytes());
    offset += p.nbytes();
  }
  return out;
}

double percentile_of(std::vector<double> v, double p) { return percentile(v, p); }

// Percentiles of the finite values of v (NaN marks a pair that was not compared).
double finite_percentile(const std::vector<double>& v, double p) {
  std::vector<double> finite;
  finite.reserve(v.size());
  for (double x : v) {
    if (!std::isnan(x)) finite.push_back(x);
  }
  return percentile(finite, p);
}

// One path's figures on one input set, against the fp64 reference: the ULP and conditioned error
// at P99 and max, and the metrics neighbouring tools report (docs/conditioned-error.md):
// msprobe's cosine similarity, max abs / max rel error and the shares of elements whose relative
// error is below 0.001 and 0.005 (msprobe core/compare/npy_compare.py), and the RMSE that
// torch._dynamo.utils.same compares (rmse(fp64_ref, res)).
struct SetFigures {
  double ulp_p99 = 0, ulp_max = 0, cond_p99 = 0, cond_max = 0;
  double cosine = 0, max_abs = 0, max_rel = 0, ratio_0_001 = 0, ratio_0_005 = 0, rmse = 0;
};

SetFigures set_figures(const Tensor& y, const Tensor& ref, const ErrorStats& stats,
                       const std::vector<double>& conditioned) {
  SetFigures f;
  f.ulp_p99 = stats.ulp_error.p99;
  f.ulp_max = stats.ulp_error.max;
  f.cond_p99 = finite_percentile(conditioned, 0.99);
  f.cond_max = finite_max(conditioned);
  const Tensor yd = y.to(DType::f64).contiguous(), rd = ref.to(DType::f64).contiguous();
  const auto py = yd.span<double>(), pr = rd.span<double>();
  // msprobe: at a zero reference both sides get machine epsilon added before dividing.
  constexpr double kFloatEpsilon = std::numeric_limits<double>::epsilon();
  double dot = 0, yy = 0, rr = 0, squared = 0;
  std::int64_t compared = 0, below_0_001 = 0, below_0_005 = 0;
  for (std::size_t i = 0; i < py.size(); ++i) {
    if (!std::isfinite(py[i]) || !std::isfinite(pr[i])) continue;
    ++compared;
    dot += py[i] * pr[i];
    yy += py[i] * py[i];
    rr += pr[i] * pr[i];
    const double diff = py[i] - pr[i];
    squared += diff * diff;
    f.max_abs = std::max(f.max_abs, std::abs(diff));
    const double b = pr[i] == 0 ? kFloatEpsilon : pr[i],
                 n = pr[i] == 0 ? py[i] + kFloatEpsilon : py[i];
    const double rel = std::abs((n - b) / b);
    f.max_rel = std::max(f.max_rel, rel);
    below_0_001 += rel < 0.001;
    below_0_005 += rel < 0.005;
  }
  const double norm_y = std::sqrt(yy), norm_r = std::sqrt(rr);
  f.cosine = norm_y <= kFloatEpsilon && norm_r <= kFloatEpsilon ? 1.0
             : norm_y <= kFloatEpsilon || norm_r <= kFloatEpsilon
                 ? std::numeric_limits<double>::quiet_NaN()
                 : dot / (norm_y * norm_r);
  f.ratio_0_001 =
      compared ? double(below_0_001) / double(compared) : std::numeric_limits<double>::quiet_NaN();
  f.ratio_0_005 =
      compared ? double(below_0_005) / double(compared) : std::numeric_limits<double>::quiet_NaN();
  f.rmse =
      compared ? std::sqrt(squared / double(compared)) : std::numeric_limits<double>::quiet_NaN();
  return f;
}

// torch.allclose(a, b, atol=tol, rtol=tol): |a - b| <= tol + tol |b| everywhere (same's first test,
// which passes a pair before the RMSE rule is consulted).
bool allclose(const Tensor& a, const Tensor& b, double tol) {
  const Tensor ad = a.to(DType::f64).contiguous(), bd = b.to(DType::f64).contiguous();
  const auto pa = ad.span<double>(), pb = bd.span<double>();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    if (!(std::abs(pa[i] - pb[i]) <= tol + tol * std::abs(pb[i])) && !(pa[i] == pb[i]))
      return false;
  }
  return true;
}

// The per-set figures of one path as columns: {"ulp_p99": [set 0, set 1, ...], ...}.
nlohmann::json set_columns(const std::vector<SetFigures>& sets) {
  nlohmann::json out;
  auto column = [&](const char* name, double SetFigures::*field) {
    nlohmann::json values = nlohmann::json::array();
    for (const SetFigures& s : sets)
      values.push_back(std::isfinite(s.*field) ? nlohmann::json(s.*field)
                                               : nlohmann::json(nullptr));
    out[name] = std::move(values);
  };
  column("ulp_p99", &SetFigures::ulp_p99);
  column("ulp_max", &SetFigures::ulp_max);
  column("cond_p99", &SetFigures::cond_p99);
  column("cond_max", &SetFigures::cond_max);
  column("cosine", &SetFigures::cosine);
  column("max_abs_err", &SetFigures::max_abs);
  column("max_rel_err", &SetFigures::max_rel);
  column("one_thousandth_err_ratio", &SetFigures::ratio_0_001);
  column("five_thousandths_err_ratio", &SetFigures::ratio_0_005);
  column("rmse_vs_fp64", &SetFigures::rmse);
  return out;
}

// ---- the fusion switch list (--fusion-switches=FILE, docs/fusion-switches.md)
struct ListedSwitch {
  std::string chain;
  DType dtype = DType::f32;
  std::string op;
  engine::OpKnobs knobs;
};

std::vector<ListedSwitch>& listed_switches() {
  static std::vector<ListedSwitch> list;
  return list;
}

// Reads and checks the whole list before anything runs: a bad entry is named (its index, chain,
// op and switch) with exit status 2.
constexpr const char* kWholeGraph = "(whole graph)";  // Switch::to_json's op of a graph-wide one

void load_switch_list(const std::filesystem::path& file, const std::vector<Chain>& all,
                      const SuiteConfig& config) {
  const bool quick = config.quick();
  const std::string flag = fmt::format("--fusion-switches={}", file.string());
  std::ifstream in(file);
  if (!in) usage_error(fmt::format("{}: cannot read the file", flag));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    usage_error(fmt::format("{}: not JSON: {}", flag, e.what()));
  }
  if (!doc.is_object() || doc.value("schema", "") != "fusebench.fusion_switches/1" ||
      !doc.contains("entries") || !doc["entries"].is_array()) {
    usage_error(fmt::format(
        "{}: expected an object with schema fusebench.fusion_switches/1 and an entries array",
        flag));
  }
  std::size_t index = 0;
  for (const nlohmann::json& entry : doc["entries"]) {
    auto text = [&](const char* key) {
      return entry.is_object() && entry.contains(key) && entry[key].is_string()
                 ? entry[key].get<std::string>()
                 : std::string();
    };
    const std::string where =
        fmt::format("{}: entry {} (chain {}, dtype {}, op {}, switch {})", flag, index++,
                    text("chain"), text("dtype"), text("op"), text("switch"));
    for (const char* key : {"chain", "dtype", "op", "switch"}) {
      if (text(key).empty()) usage_error(fmt::format("{}: no {} string", where, key));
    }
    const auto chain = std::find_if(all.begin(), all.end(),
                                    [&](const Chain& c) { return c.name == text("chain"); });
    if (chain == all.end()) usage_error(fmt::format("{}: task B has no such chain", where));
    ListedSwitch listed;
    listed.chain = chain->name;
    try {
      listed.dtype = parse_dtype(text("dtype"));
      listed.knobs = engine::parse_switch(text("switch"));
    } catch (const InputError& e) {
      usage_error(fmt::format("{}: {}", where, e.what()));
    }
    const Graph g = chain->build(listed.dtype, quick);
    // "(whole graph)": a graph-wide switch (a compile option, per-op rounding everywhere)
    const bool whole_graph = text("op") == kWholeGraph;
    const bool known_op = std::any_of(g.nodes().begin(), g.nodes().end(), [&](const auto& n) {
      return n.name == text("op") && n.kind != engine::OpKind::Input;
    });
    if (!whole_graph && !known_op)
      usage_error(fmt::format("{}: the chain's graph has no op of that name", where));
    if (!whole_graph && !listed.knobs.compiler_options.empty())
      usage_error(fmt::format("{}: a compiler option is set for the whole graph (op {})", where,
                              kWholeGraph));
    listed.op = whole_graph ? "" : text("op");
    // A switch the device cannot realise (a per-op knob a framework has no handle on, a compile
    // option it does not offer) is refused here, as an unknown op is, not skipped in every case.
    const std::string unrealisable = not_applicable(
        config, true,
        engine::with_switches({}, {engine::Switch{listed.op, "", listed.dtype, "", listed.knobs}}));
    if (!unrealisable.empty())
      usage_error(fmt::format("{}: the device cannot realise it ({})", where, unrealisable));
    listed_switches().push_back(std::move(listed));
  }
}

// The fused path's knobs for one chain and dtype: the listed switches applied.
engine::EngineOptions fused_options_for(const std::string& chain, DType dtype) {
  std::vector<engine::Switch> applied;
  for (const ListedSwitch& s : listed_switches()) {
    if (s.chain == chain && s.dtype == dtype) applied.push_back({s.op, "", dtype, "", s.knobs});
  }
  return engine::with_switches({}, applied);
}

// Wall time (ms) of each executor over interleaved rounds (one sample of each per round, the
// order rotating, so that a slow spell of the machine falls on all of them alike). A sample is the
// mean of enough back-to-back runs to last about 2 ms: the quick profile's graphs run in
// tens of microseconds. Per executor: the median sample, and the median and 95 % interval
// (sign-test order statistics) of its per-round ratio to executor 1 (plain fused).
struct InterleavedTimes {
  std::vector<double> median_ms;
  std::vector<std::array<double, 3>> ratio_to_fused;  // low, median, high
};
InterleavedTimes interleaved_times(const std::vector<engine::Executor*>& executors, const Graph& g,
                                   const engine::Inputs& in, int rounds) {
  auto time_ms = [&](engine::Executor& e, int reps) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) e.run(g, in);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count() /
           reps;
  };
  for (engine::Executor* e : executors) e->run(g, in);  // plans, loads, first-touch pages
  const double first = time_ms(*executors.at(1), 3);
  const int reps = int(std::clamp(std::ceil(2.0 / std::max(first, 1e-3)), 1.0, 500.0));
  std::vector<std::vector<double>> times(executors.size());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < executors.size(); ++k) {
      const std::size_t e = (k + std::size_t(r)) % executors.size();
      times[e].push_back(time_ms(*executors[e], reps));
    }
  }
  // the largest k with P(Binomial(n, 1/2) < k) <= 2.5 %: [x_(k), x_(n+1-k)] covers the median
  // with at least 95 %
  const int n = rounds;
  int k = 0;
  double cdf = 0, term = std::pow(0.5, n);
  for (int j = 0; j < n; ++j) {
    if (cdf + term > 0.025) break;
    cdf += term;
    k = j + 1;
    term = term * double(n - j) / double(j + 1);
  }
  InterleavedTimes out;
  for (std::size_t e = 0; e < executors.size(); ++e) {
    out.median_ms.push_back(percentile(times[e], 0.5));
    std::vector<double> ratio;
    for (int r = 0; r < rounds; ++r)
      ratio.push_back(times[e][std::size_t(r)] / times[1][std::size_t(r)]);
    std::sort(ratio.begin(), ratio.end());
    const std::size_t low = std::size_t(std::max(k, 1) - 1), high = std::size_t(n - std::max(k, 1));
    out.ratio_to_fused.push_back({ratio[low], percentile(ratio, 0.5), ratio[high]});
  }
  return out;
}
constexpr int kCostRounds = 21;
void run_case(benchmark::State& state, const std::string& name, const Chain& chain,
              std::size_t chain_index, DType dtype, bool heavy, const SuiteConfig& config) {
  const int sets = config.quick() ? 100 : 1000;
  const std::uint64_t seed = 9000 + chain_index;
  const Graph g = chain.build(dtype, config.quick());
  const engine::EngineOptions eager_options, fused_options = fused_options_for(chain.name, dtype);
  auto eager = make_executor(config, false, eager_options);
  auto fused = make_executor(config, true, fused_options);
  CaseAttribution attribution_search(config, g, eager_options, fused_options);
  int not_attempted = 0;
  struct FoundSwitch {
    engine::Switch what;
    std::vector<int> sets;
  };
  std::map<std::string, FoundSwitch> found;  // by op and switch
  int explained = 0, unexplained = 0;
  engine::EngineOptions emulate;
  emulate.emulate_per_op_rounding = true;
  // a device without per-op rounding (a torch.compile backend that is not Inductor) has no
  // emulated path: emulated_vs_eager_max_ulp is then -1
  auto fused_emulated = not_applicable(config, true, emulate).empty()
                            ? make_executor(config, true, emulate)
                            : nullptr;
  std::vector<Tensor> refs, eager_out, fused_out;
  std::vector<double> eager_set_max, fused_set_max;
  std::vector<double> eager_conditioned, fused_conditioned;  // every element of every set
  std::vector<SetFigures> eager_sets, fused_sets;
  std::vector<bool> sets_allclose;
  int cond_counterexamples = 0, well_conditioned = 0, ill_conditioned = 0;
  // ULP counter-examples (fused's set max ULP error above eager's), and those that are no
  // counter-example on the deciding measure: at cancellation, or within the margin
  int ulp_counterexamples = 0, at_cancellation = 0, ulp_within_margin = 0, localised = 0;
  std::vector<SetVerdict> set_verdicts;
  constexpr std::size_t kExamples = 5;  // examples kept of each kind that is not attributed
  nlohmann::json cancellation_examples = nlohmann::json::array(),
                 within_margin_examples = nlohmann::json::array();
  std::vector<std::pair<double, int>> shared_sets;  // (eager's set max cond error, set)
  double emulated_gap = 0, fused_seconds = 0;
  nlohmann::json counterexamples = nlohmann::json::array();
  {  // compile every kernel before anything is timed
    const engine::Inputs warm = inputs_for(g, heavy, seed, 0);
    fused->run(g, warm);
    if (fused_emulated) fused_emulated->run(g, warm);
  }
  Progress progress(
      fmt::format("B {} {} {}", chain.name, dtype_name(dtype), heavy ? "heavy" : "uniform"), sets);
  // A set's accuracy work (its inputs, the fp64 reference, the error statistics) is
  // single-threaded and independent of the other sets': it runs on every core, a batch of sets at
  // a time. The executors run between those phases with the machine to themselves, so the fused
  // time is measured as before. Results are collected in set order.
  constexpr int kBatch = 32;
  cpu::ThreadPool accuracy_pool(int(std::max(1u, std::thread::hardware_concurrency())));
  struct SetWork {
    engine::Inputs in;
    Tensor ref, bound, eager, fused, fused_emulated;
    ErrorStats eager_stats, fused_stats;
    std::vector<double> eager_conditioned, fused_conditioned;
    SetFigures eager_figures, fused_figures;
    bool allclose = false;
    double emulated_gap = 0;
  };
  for (auto _ : state) {
    for (int batch = 0; batch < sets; batch += kBatch) {
      const int batch_end = std::min(sets, batch + kBatch);
      std::vector<SetWork> work(std::size_t(batch_end - batch));
      auto slot = [&](std::int64_t s) -> SetWork& { return work[std::size_t(s - batch)]; };
      accuracy_pool.parallel_for(batch_end - batch, [&](std::int64_t k) {
        SetWork& w = work[std::size_t(k)];
        w.in = inputs_for(g, heavy, seed, std::uint64_t(batch + k));
        engine::BoundedReference bounded = engine::fp64_reference_with_bound(g, w.in);
        w.ref = std::move(bounded.outputs[0]);
        w.bound = std::move(bounded.bounds[0]);
      });
      for (int s = batch; s < batch_end; ++s) {
        SetWork& w = slot(s);
        w.eager = eager->run(g, w.in).outputs[0];
        const auto start = std::chrono::steady_clock::now();
        w.fused = fused->run(g, w.in).outputs[0];
        fused_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (fused_emulated) w.fused_emulated = fused_emulated->run(g, w.in).outputs[0];
      }
      accuracy_pool.parallel_for(batch_end - batch, [&](std::int64_t k) {
        SetWork& w = work[std::size_t(k)];
        w.emulated_gap =
            fused_emulated ? double(ulp_diff(w.fused_emulated, w.eager).max_distance) : -1;
        w.eager_stats = error_stats(w.eager, w.ref);
        w.fused_stats = error_stats(w.fused, w.ref);
        w.eager_conditioned = engine::conditioned_error(w.eager, w.ref, w.bound);
        w.fused_conditioned = engine::conditioned_error(w.fused, w.ref, w.bound);
        w.eager_figures = set_figures(w.eager, w.ref, w.eager_stats, w.eager_conditioned);
        w.fused_figures = set_figures(w.fused, w.ref, w.fused_stats, w.fused_conditioned);
        w.allclose = allclose(w.fused, w.eager, 1e-4);
      });
      for (int s = batch; s < batch_end; ++s) {
        SetWork& w = slot(s);
        const auto& es = w.eager_stats;
        const auto& fs = w.fused_stats;
        emulated_gap = std::max(emulated_gap, w.emulated_gap);
        eager_set_max.push_back(es.ulp_error.max);
        fused_set_max.push_back(fs.ulp_error.max);
        eager_sets.push_back(w.eager_figures);
        fused_sets.push_back(w.fused_figures);
        sets_allclose.push_back(w.allclose);
        eager_conditioned.insert(eager_conditioned.end(), w.eager_conditioned.begin(),
                                 w.eager_conditioned.end());
        fused_conditioned.insert(fused_conditioned.end(), w.fused_conditioned.begin(),
                                 w.fused_conditioned.end());
        cond_counterexamples += w.fused_figures.cond_max > w.eager_figures.cond_max;
        const std::int64_t at = fs.ulp_error.max_index;  // fused's worst ULP element
        const double bound_at = w.bound.value_at(at),
                     condition = engine::condition_of(bound_at, w.ref.value_at(at), dtype);
        const SetVerdict verdict = classify_set({w.eager_figures.cond_max, w.fused_figures.cond_max,
                                                 es.ulp_error.max, fs.ulp_error.max, condition});
        set_verdicts.push_back(verdict);
        if (fs.ulp_error.max > es.ulp_error.max) {
          ++ulp_counterexamples;
          (!(condition <= kIllConditioned) ? ill_conditioned : well_conditioned) += 1;
        }
        if (shared_error(w.eager_figures.cond_max, w.fused_figures.cond_max))
          shared_sets.push_back({w.eager_figures.cond_max, s});
        // the element's figures: fused's worst ULP element, and each path's worst conditioned one
        const std::int64_t cond_at =
            std::int64_t(std::max_element(w.fused_conditioned.begin(), w.fused_conditioned.end(),
                                          [](double a, double b) {
                                            return std::isnan(a) || (!std::isnan(b) && a < b);
                                          }) -
                         w.fused_conditioned.begin());
        nlohmann::json figures = {
            {"set", s},
            {"seed", seed},
            {"stream_base", std::uint64_t(s) * 64},
            {"fused_cond_max", w.fused_figures.cond_max},
            {"eager_cond_max", w.eager_figures.cond_max},
            {"fused_cond_p99", w.fused_figures.cond_p99},
            {"eager_cond_p99", w.eager_figures.cond_p99},
            {"fused_ulp_max", fs.ulp_error.max},
            {"eager_ulp_max", es.ulp_error.max},
            {"element", at},
            {"error_bound", bound_at},
            {"condition",
             std::isfinite(condition) ? nlohmann::json(condition) : nlohmann::json("inf")},
            {"conditioning", !(condition <= kIllConditioned) ? "ill" : "well"},
            {"fused_cond_error", w.fused_conditioned[std::size_t(at)]},
            {"eager_cond_error", w.eager_conditioned[std::size_t(at)]},
            {"fused_value", w.fused.value_at(at)},
            {"eager_value", w.eager.value_at(at)},
            {"reference_value", w.ref.value_at(at)},
            {"cond_element", cond_at},
            {"cond_element_reference_value", w.ref.value_at(cond_at)},
            {"cond_element_bound", w.bound.value_at(cond_at)},
            {"cond_element_fused_value", w.fused.value_at(cond_at)},
            {"cond_element_eager_value", w.eager.value_at(cond_at)}};
        if (verdict == SetVerdict::AtCancellation || verdict == SetVerdict::UlpWithinMargin) {
          auto& examples = verdict == SetVerdict::AtCancellation ? cancellation_examples
                                                                 : within_margin_examples;
          (verdict == SetVerdict::AtCancellation ? at_cancellation : ulp_within_margin) += 1;
          if (examples.size() < kExamples) examples.push_back(figures);
        }
        if (verdict == SetVerdict::Counterexample) {
          // Localise on the deciding measure: per op, each path's conditioned (and ULP) error
          // against that op's fp64 value and bound; the first op where fused is worse beyond the
          // margin.
          const OpValues values =
              op_values(g, w.in, *eager, *fused, attribution_search.framework());
          const std::vector<OpErrors> errors = op_errors(g, values);
          const NodeId first_id = first_divergent(values, errors);
          const std::string first = first_id < 0 ? "" : g.node(first_id).name;
          const double eager_max = w.eager_figures.cond_max;
          const double allowed = kCounterexampleMargin.allowed(eager_max);
          CaseAttribution::Outcome a = attribution_search.attribute(
              [&](engine::Executor& with) {
                return finite_max(engine::conditioned_error(with.run(g, w.in).outputs[0], w.ref,
                                                            w.bound)) <= allowed;
              },
              fmt::format("fused set max conditioned error <= max(eager's + {}, {} x eager's)",
                          kCounterexampleMargin.units_of_bound,
                          1 + kCounterexampleMargin.relative));
          nlohmann::json& attribution = a.json;
          if (a.status == "not attempted") {
            ++not_attempted;
          } else if (a.status == "explained") {
            ++explained;
            if (a.attribution.localised) ++localised;
            const Tensor y =
                attribution_search.fused_with(a.attribution.switches).run(g, w.in).outputs[0];
            attribution["bit_equal_to_eager"] = bit_equal(y, w.eager).equal;
            for (const engine::Switch& sw : a.attribution.switches) {
              FoundSwitch& f = found[sw.op + " " + sw.token()];
              f.what = sw;
              f.sets.push_back(s);
            }
          } else if (a.status == "unexplained") {
            ++unexplained;
          }
          if (a.status != "explained" || !a.attribution.localised) {
            // no switch removed it (or none could be tried), or only a graph-wide one did: its
            // candidate mechanism at its first divergent op, with evidence
            attribution["candidate_mechanism"] =
                first_id < 0 ? nlohmann::json{{"op", nullptr},
                                              {"evidence",
                                               "no op's value is worse beyond the margin on its "
                                               "own: the difference appears only in combination"}}
                             : candidate_mechanism(g, w.in, values, first_id, w.ref, w.bound,
                                                   eager_max, *fused);
          }
          figures["first_divergent_op"] = first.empty() ? "(none alone)" : first;
          figures["attribution"] = attribution;
          figures["ops"] = op_errors_json(g, errors);
          counterexamples.push_back(figures);
        }
        refs.push_back(w.ref);
        eager_out.push_back(w.eager);
        fused_out.push_back(w.fused);
      }
      progress.tick(batch_end);
    }
    state.SetIterationTime(fused_seconds / sets);
  }
  // Shared errors: the worst sets (by eager's set max conditioned error) localised, the op where
  // eager's error first exceeds the threshold named, and the bound checked there.
  nlohmann::json shared_examples = nlohmann::json::array();
  std::sort(shared_sets.begin(), shared_sets.end(), std::greater<>());
  for (std::size_t k = 0; k < std::min<std::size_t>(3, shared_sets.size()); ++k) {
    const int s = shared_sets[k].second;
    const engine::Inputs in = inputs_for(g, heavy, seed, std::uint64_t(s));
    const OpValues values = op_values(g, in, *eager, *fused, attribution_search.framework());
    const std::vector<OpErrors> errors = op_errors(g, values);
    nlohmann::json example = shared_error_at(g, in, values, errors);
    const NodeId out = g.outputs()[0];
    example.update({{"set", s},
                    {"eager_cond_max", errors.back().eager_cond_max},
                    {"fused_cond_max", errors.back().fused_cond_max},
                    {"eager_ulp_max", errors.back().eager_ulp_max},
                    {"fused_ulp_max", errors.back().fused_ulp_max}});
    (void)out;
    shared_examples.push_back(example);
  }
  // Each switch's cost, and the applied list's, timed in this run beside plain fused and eager.
  const engine::Inputs timing_inputs = inputs_for(g, heavy, seed, 0);
  nlohmann::json switch_costs = nlohmann::json::array();
  // A second executor of plain fused: the A/A control of every timing below (a ratio away from 1
  // there is the executors' own difference, not a switch's cost).
  nlohmann::json applied = nlohmann::json::array();
  for (const ListedSwitch& listed : listed_switches()) {
    if (listed.chain == chain.name && listed.dtype == dtype)
      applied.push_back({{"op", listed.op.empty() ? kWholeGraph : listed.op},
                         {"switch", listed.knobs.describe()}});
  }
  std::unique_ptr<engine::Executor> fused_again;
  if (!found.empty() || !applied.empty()) fused_again = make_executor(config, true, eager_options);
  for (const auto& [key, f] : found) {
    engine::Executor& with =
        attribution_search.fused_with({f.what}, false);  // a cost is measured whatever the budget
    const InterleavedTimes t = interleaved_times(
        {eager.get(), fused.get(), &with, fused_again.get()}, g, timing_inputs, kCostRounds);
    nlohmann::json entry = f.what.to_json();
    entry.update({{"removes_sets", f.sets},
                  {"eager_ms", t.median_ms[0]},
                  {"fused_ms", t.median_ms[1]},
                  {"fused_with_switch_ms", t.median_ms[2]},
                  {"slowdown", t.ratio_to_fused[2][1]},
                  {"slowdown_ci95", {t.ratio_to_fused[2][0], t.ratio_to_fused[2][2]}},
                  {"aa_ratio", t.ratio_to_fused[3][1]},
                  {"aa_ratio_ci95", {t.ratio_to_fused[3][0], t.ratio_to_fused[3][2]}},
                  {"rounds", kCostRounds}});
    switch_costs.push_back(entry);
  }
  if (!applied.empty()) {
    // the speed the applied list gives up: plain fused is executor 1 here
    auto plain = make_executor(config, true, eager_options);
    const InterleavedTimes t = interleaved_times(
        {eager.get(), plain.get(), fused.get(), fused_again.get()}, g, timing_inputs, kCostRounds);
    state.counters["eager_ms_interleaved"] = t.median_ms[0];
    state.counters["fused_ms_without_switches"] = t.median_ms[1];
    state.counters["fused_ms_with_switches"] = t.median_ms[2];
    state.counters["switches_slowdown"] = t.ratio_to_fused[2][1];
    state.counters["switches_slowdown_low"] = t.ratio_to_fused[2][0];
    state.counters["switches_slowdown_high"] = t.ratio_to_fused[2][2];
    state.counters["switches_aa_ratio"] = t.ratio_to_fused[3][1];
    state.counters["switches_aa_ratio_low"] = t.ratio_to_fused[3][0];
    state.counters["switches_aa_ratio_high"] = t.ratio_to_fused[3][2];
  }
  const Tensor ref_all = concat_flat(refs);
  const auto es = error_stats(concat_flat(eager_out), ref_all);
  const auto fs = error_stats(concat_flat(fused_out), ref_all);
  state.counters["sets"] = sets;
  state.counters["eager_ulp_p50"] = es.ulp_error.p50;
  state.counters["eager_ulp_p99"] = es.ulp_error.p99;
  state.counters["eager_ulp_max"] = es.ulp_error.max;
  state.counters["fused_ulp_p50"] = fs.ulp_error.p50;
  state.counters["fused_ulp_p99"] = fs.ulp_error.p99;
  state.counters["fused_ulp_max"] = fs.ulp_error.max;
  state.counters["eager_abs_err_max"] = es.abs.max;
  state.counters["fused_abs_err_max"] = fs.abs.max;
  state.counters["eager_rel_err_p99"] = es.rel.p99;
  state.counters["fused_rel_err_p99"] = fs.rel.p99;
  state.counters["eager_setmax_p50"] = percentile_of(eager_set_max, 0.5);
  state.counters["eager_setmax_p99"] = percentile_of(eager_set_max, 0.99);
  state.counters["fused_setmax_p50"] = percentile_of(fused_set_max, 0.5);
  state.counters["fused_setmax_p99"] = percentile_of(fused_set_max, 0.99);
  state.counters["fused_le_eager_p99"] = fs.ulp_error.p99 <= es.ulp_error.p99 ? 1 : 0;
  state.counters["fused_le_eager_max"] = fs.ulp_error.max <= es.ulp_error.max ? 1 : 0;
  // counter-examples on the deciding measure (docs/fusion-switches.md); the ULP ones apart
  state.counters["counterexamples"] = double(counterexamples.size());
  state.counters["ulp_counterexamples"] = ulp_counterexamples;
  state.counters["at_cancellation"] = at_cancellation;
  state.counters["ulp_within_margin"] = ulp_within_margin;
  state.counters["shared_error_sets"] = double(shared_sets.size());
  state.counters["counterexamples_localised"] = localised;
  state.counters["emulated_vs_eager_max_ulp"] = fused_emulated ? emulated_gap : -1;
  const double eager_cond_p99 = finite_percentile(eager_conditioned, 0.99),
               fused_cond_p99 = finite_percentile(fused_conditioned, 0.99);
  const double eager_cond_max = finite_max(eager_conditioned),
               fused_cond_max = finite_max(fused_conditioned);
  state.counters["eager_cond_p50"] = finite_percentile(eager_conditioned, 0.5);
  state.counters["eager_cond_p99"] = eager_cond_p99;
  state.counters["eager_cond_max"] = eager_cond_max;
  state.counters["fused_cond_p50"] = finite_percentile(fused_conditioned, 0.5);
  state.counters["fused_cond_p99"] = fused_cond_p99;
  state.counters["fused_cond_max"] = fused_cond_max;
  state.counters["fused_le_eager_cond_p99"] = fused_cond_p99 <= eager_cond_p99 ? 1 : 0;
  state.counters["fused_le_eager_cond_max"] = fused_cond_max <= eager_cond_max ? 1 : 0;
  state.counters["cond_counterexamples"] = cond_counterexamples;
  state.counters["counterexamples_well_conditioned"] = well_conditioned;
  state.counters["counterexamples_ill_conditioned"] = ill_conditioned;
  state.counters["counterexamples_explained"] = explained;
  state.counters["counterexamples_unexplained"] = unexplained;
  write_evidence(
      config, name,
      {{"chain", chain.name},
       {"dtype", dtype_name(dtype)},
       {"distribution", heavy ? "N(0,3^2) with 0.1% outliers x20" : "U(-1,1)"},
       {"eager_set_max_ulp", eager_set_max},
       {"fused_set_max_ulp", fused_set_max},
       {"counterexamples", counterexamples},
       {"counterexample_margin", kCounterexampleMargin.to_json()},
       {"ill_conditioned_above", kIllConditioned},
       {"ulp_counterexamples", ulp_counterexamples},
       {"at_cancellation",
        {{"about",
          "sets where only the ULP error is worse fused, at an ill-conditioned element "
          "(condition above ill_conditioned_above): neither path accurate; never "
          "attributed, never counted as counter-examples"},
         {"count", at_cancellation},
         {"examples", cancellation_examples}}},
       {"ulp_within_margin",
        {{"about",
          "sets where only the ULP error is worse fused, at a well-conditioned element, "
          "and the conditioned error within the margin: not attributed"},
         {"count", ulp_within_margin},
         {"examples", within_margin_examples}}},
       {"shared_errors",
        {{"about",
          "sets where both paths' set max conditioned error exceeds threshold: a finding "
          "about the kernels (both paths miss fp64 by far more than the bound), not "
          "about fusion; the worst sets localised, the bound checked where it arises"},
         {"threshold", kSharedErrorAbove},
         {"count", shared_sets.size()},
         {"examples", shared_examples}}},
       {"switches", switch_costs},
       {"applied_switches", applied},
       {"attribution_summary",
        {{"counterexamples", counterexamples.size()},
         {"explained", explained},
         {"localised", localised},
         {"not_localised", explained - localised},
         {"unexplained", unexplained},
         {"not_attempted", not_attempted},
         {"not_applicable", int(counterexamples.size()) - explained - unexplained - not_attempted},
         {"candidates", attribution_search.candidates().size()},
         {"reruns", attribution_search.reruns()},
         {"budget_note", not_attempted ? attribution_search.budget_note() : ""},
         {"reason", attribution_search.not_applicable()}}},
       {"per_set",
        {{"schema", "fusebench.B.per_set/1"},
         {"sets", sets},
         {"eager", set_columns(eager_sets)},
         {"fused", set_columns(fused_sets)},
         {"fused_allclose_eager_1e-4", sets_allclose},
         {"counterexample_margin", kCounterexampleMargin.to_json()},
         {"verdict",
          [&] {
            nlohmann::json v = nlohmann::json::array();
            for (SetVerdict x : set_verdicts) v.push_back(verdict_name(x));
            return v;
          }()},
         {"shared_error", [&] {
            nlohmann::json v = nlohmann::json::array();
            for (std::size_t i = 0; i < eager_sets.size(); ++i)
              v.push_back(shared_error(eager_sets[i].cond_max, fused_sets[i].cond_max));
            return v;
          }()}}}});
}
}  // namespace

void register_benchmarks(const SuiteConfig& config) {
  const auto all = chains();
  if (!config.fusion_switches.empty()) load_switch_list(config.fusion_switches, all, config);
  for (std::size_t c = 0; c < all.size(); ++c) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
      for (bool heavy : {false, true}) {
        const Chain chain = all[c];
        const Axes axes = Axes()
                              .add("chain", chain.name)
                              .add("dtype", dtype_name(dtype))
                              .add("dist", heavy ? "heavy" : "uniform")
                              .add("device", config.device);
        register_case(
            "B", axes,
            [chain, c, dtype, heavy, config](benchmark::State& s, const std::string& name) {
              run_case(s, name, chain, c, dtype, heavy, config);
            })
            // One case is its seeded input sets, the same figures every time: the full profile's timing
            // repetitions would judge the same 1,000 sets five times over.
            ->Iterations(1)
            ->Repetitions(1)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace fusebench::suite

FUSEBENCH_SUITE_MAIN("accumulated_error")
