// fusebench-diff: compare two .npy dumps (and each against a reference) bit for bit, by ULP and by
// error statistics. Exit status: 0 when it compared (equal or not), 2 on bad input.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "fusebench/compare.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/json.hpp"
#include "fusebench/npy.hpp"

namespace fb = fusebench;

namespace {

constexpr int kBadInput = 2;

std::string summary_line(const char* name, const fb::ErrorSummary& s) {
  return fmt::format("  {:<4} max {:.6g} (at [{}])  mean {:.6g}  p50 {:.6g}  p99 {:.6g}", name, s.max, s.max_index,
                     s.mean, s.p50, s.p99);
}

void print_stats(const fb::ErrorStats& stats) {
  fmt::print("{}\n{}\n{}\n", summary_line("abs", stats.abs), summary_line("rel", stats.rel),
             summary_line("ulp", stats.ulp));
  fmt::print("  compared {} of {}; NaN y/ref {}/{}; inf y/ref {}/{}; non-finite mismatches {}\n", stats.compared,
             stats.count, stats.nan_y, stats.nan_ref, stats.inf_y, stats.inf_ref, stats.mismatches);
  std::string bins;
  const auto& hist = stats.ulp_histogram;
  for (int k = 0; k < hist.exact_bins(); ++k) {
    if (hist.counts[std::size_t(k)] != 0) bins += fmt::format(" {}:{}", k, hist.counts[std::size_t(k)]);
  }
  fmt::print("  integer ULP histogram:{} >={}:{} NaN-pairs:{}\n", bins, hist.exact_bins(), hist.counts.back(),
             hist.nan_pairs);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Compare two .npy dumps: bit equality, integer ULP histogram and error statistics of A against B,\n"
      "and with --ref, of A and of B against a reference (normally the fp64 one).\n"
      "ulp.* are fractional ULP errors in A's format at the reference value; ulp.hist bins integer ULP\n"
      "distances to the reference rounded to A's format. Exit 0 when compared, 2 on bad input."};
  std::string path_a, path_b, path_ref;
  bool as_json = false, nan_equal = false, zeros_equal = false;
  int bins = 16;
  app.add_option("A", path_a, "first dump (.npy)")->required();
  app.add_option("B", path_b, "second dump (.npy); the reference of A when no --ref is given")->required();
  app.add_option("--ref", path_ref, "reference dump (.npy), any floating dtype");
  app.add_flag("--json", as_json, "print one JSON object instead of text");
  app.add_option("--bins", bins, "exact ULP histogram bins before the '>= N' bin")->check(CLI::Range(1, 1 << 20));
  app.add_flag("--nan-equal", nan_equal, "bit equality: any NaN equals any NaN (default: compare NaN bits)");
  app.add_flag("--zeros-equal", zeros_equal, "bit equality: +0 equals -0 (default: they differ)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kBadInput;
  }

  try {
    const fb::Tensor a = fb::read_npy(path_a);
    const fb::Tensor b = fb::read_npy(path_b);
    fb::check_same_shape(a, b, fmt::format("fusebench-diff {} vs {}", path_a, path_b));
    if (!fb::is_floating(a.dtype()) || !fb::is_floating(b.dtype())) {
      fb::throw_input_error("fusebench-diff: {} is {} and {} is {}; both must be floating (f16, bf16, f32, f64)",
                            path_a, a.describe(), path_b, b.describe());
    }
    const fb::ErrorStatsOptions stats_options{.histogram_bins = bins};
    fb::BitEqualResult equality;
    if (a.dtype() == b.dtype()) {
      equality = fb::bit_equal(a, b,
                               {.nan = nan_equal ? fb::NanPolicy::AnyNanEqual : fb::NanPolicy::Bitwise,
                                .zero = zeros_equal ? fb::ZeroPolicy::SignedZerosEqual : fb::ZeroPolicy::Bitwise});
    } else {
      equality = {false, a.numel(), a.numel(), {}};
    }
    const fb::ErrorStats a_vs_b = fb::error_stats(a, b, stats_options);
    std::optional<fb::Tensor> ref;
    if (!path_ref.empty()) {
      ref = fb::read_npy(path_ref);
      fb::check_same_shape(a, *ref, fmt::format("fusebench-diff {} vs --ref {}", path_a, path_ref));
    }

    if (as_json) {
      nlohmann::json out = fb::to_json(a_vs_b);
      out["a"] = path_a;
      out["b"] = path_b;
      out["shape"] = a.shape();
      out["dtype_b"] = fb::dtype_name(b.dtype());
      out["bit_equal"] = equality.equal;
      out["mismatches"] = equality.mismatches;
      out["first_mismatch_indices"] = equality.first_mismatch_indices;
      out["nonfinite_mismatches"] = a_vs_b.mismatches;
      out["policies"] = {{"nan", nan_equal ? "any-nan-equal" : "bitwise"},
                         {"signed_zero", zeros_equal ? "equal" : "bitwise"}};
      if (ref) {
        out["against_ref"] = {{"ref", path_ref},
                              {"ref_dtype", fb::dtype_name(ref->dtype())},
                              {"a", fb::to_json(fb::error_stats(a, *ref, stats_options))},
                              {"b", fb::to_json(fb::error_stats(b, *ref, stats_options))}};
      }
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    fmt::print("A: {} {}\nB: {} {}\n", path_a, a.describe(), path_b, b.describe());
    if (a.dtype() != b.dtype()) {
      fmt::print("bit_equal: no (dtypes differ)\n");
    } else {
      fmt::print("bit_equal: {} ({} of {} elements differ{})\n", equality.equal ? "yes" : "no", equality.mismatches,
                 equality.count,
                 equality.first_mismatch_indices.empty()
                     ? ""
                     : fmt::format("; first at {}", fmt::join(equality.first_mismatch_indices, ", ")));
    }
    fmt::print("A against B:\n");
    print_stats(a_vs_b);
    if (ref) {
      fmt::print("A against ref {} ({}):\n", path_ref, ref->describe());
      print_stats(fb::error_stats(a, *ref, stats_options));
      fmt::print("B against ref:\n");
      print_stats(fb::error_stats(b, *ref, stats_options));
    }
    return 0;
  } catch (const fb::InputError& e) {
    fmt::print(stderr, "fusebench-diff: error: {}\n", e.what());
    return kBadInput;
  }
}
