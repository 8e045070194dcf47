// fusebench-diff: compare two .npy dumps (and each against a reference) bit for bit, by ULP and by
// error statistics. Exit status: 0 when it compared (equal or not), 2 on bad input.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "fusebench/diff.hpp"
#include "fusebench/npy.hpp"

namespace fb = fusebench;

namespace {

constexpr int kBadInput = 2;

std::string number(const nlohmann::json& v) {
  return v.is_null() ? std::string("n/a") : fmt::format("{:.6g}", v.get<double>());
}

std::string summary_line(const char* name, const nlohmann::json& s) {
  return fmt::format("  {:<9} max {} (at [{}])  mean {}  p50 {}  p99 {}", name, number(s["max"]),
                     s["max_index"].get<std::int64_t>(), number(s["mean"]), number(s["p50"]),
                     number(s["p99"]));
}

std::string histogram_line(const nlohmann::json& hist) {
  std::string bins;
  for (const auto& bin : hist["bins"]) {
    if (bin["count"].get<std::uint64_t>() != 0)
      bins += fmt::format(" {}:{}", bin["ulp"].get<int>(), bin["count"].get<std::uint64_t>());
  }
  return fmt::format("{} >={}:{} NaN-pairs:{}", bins, hist["at_least"]["ulp"].get<int>(),
                     hist["at_least"]["count"].get<std::uint64_t>(),
                     hist["nan_pairs"].get<std::uint64_t>());
}

// One side against the reference: error_stats' JSON.
void print_against_ref(const nlohmann::json& stats) {
  fmt::print("{}\n{}\n{}\n", summary_line("abs", stats["abs"]), summary_line("rel", stats["rel"]),
             summary_line("ulp_error", stats["ulp_error"]));
  fmt::print("  ulp_diff to the rounded reference: max {}; histogram:{}\n",
             number(stats["ulp_diff"]["max"]), histogram_line(stats["ulp_diff"]["hist"]));
  fmt::print("  compared {} of {}; NaN y/ref {}/{}; inf y/ref {}/{}; non-finite mismatches {}\n",
             stats["compared"].get<std::int64_t>(), stats["n"].get<std::int64_t>(),
             stats["nan"]["y"].get<std::int64_t>(), stats["nan"]["ref"].get<std::int64_t>(),
             stats["inf"]["y"].get<std::int64_t>(), stats["inf"]["ref"].get<std::int64_t>(),
             stats["mismatches"].get<std::int64_t>());
}

void print_text(const nlohmann::json& out, const fb::Tensor& a, const fb::Tensor& b) {
  fmt::print("A: {} {}\nB: {} {}\n", out["a"].get<std::string>(), a.describe(),
             out["b"].get<std::string>(), b.describe());
  if (a.dtype() != b.dtype()) {
    fmt::print("bit_equal: no (dtypes differ)\n");
  } else {
    const auto& first = out["first_mismatch_indices"];
    fmt::print(
        "bit_equal: {} ({} of {} elements differ{})\n", out["bit_equal"].get<bool>() ? "yes" : "no",
        out["mismatches"].get<std::int64_t>(), out["n"].get<std::int64_t>(),
        first.empty() ? ""
                      : fmt::format("; first at {}",
                                    fmt::join(first.get<std::vector<std::int64_t>>(), ", ")));
  }
  fmt::print("A against B:\n{}\n", summary_line("ulp_diff", out["ulp_diff"]));
  fmt::print("  ulp_diff histogram:{}\n", histogram_line(out["ulp_diff"]["hist"]));
  fmt::print("{}\n{}\n", summary_line("abs", out["abs"]), summary_line("rel", out["rel"]));
  fmt::print("  NaN A/B {}/{}; inf A/B {}/{}; non-finite mismatches {}\n",
             out["nan"]["a"].get<std::int64_t>(), out["nan"]["b"].get<std::int64_t>(),
             out["inf"]["a"].get<std::int64_t>(), out["inf"]["b"].get<std::int64_t>(),
             out["nonfinite_mismatches"].get<std::int64_t>());
  if (out.contains("against_ref")) {
    const auto& against = out["against_ref"];
    fmt::print("A against ref {} ({}):\n", against["ref"].get<std::string>(),
               against["ref_dtype"].get<std::string>());
    print_against_ref(against["a"]);
    fmt::print("B against ref:\n");
    print_against_ref(against["b"]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Compare two .npy dumps: bit equality, integer ULP distance (ulp_diff) and abs/rel "
      "differences of A\n"
      "against B, and with --ref, error statistics of A and of B against a reference (normally the "
      "fp64\n"
      "one): ulp_error is the fractional error in spacings of the result's format at the reference "
      "value,\n"
      "ulp_diff the integer distance to the reference rounded to the result's format.\n"
      "Exit 0 when compared, 2 on bad input."};
  std::string path_a, path_b, path_ref;
  bool as_json = false, nan_equal = false, zeros_equal = false;
  int bins = 16;
  app.add_option("A", path_a, "first dump (.npy)")->required();
  app.add_option("B", path_b, "second dump (.npy)")->required();
  app.add_option("--ref", path_ref, "reference dump (.npy), any floating dtype");
  app.add_flag("--json", as_json, "print one JSON object instead of text");
  app.add_option("--bins", bins, "exact ULP histogram bins before the '>= N' bin")
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--nan-equal", nan_equal,
               "bit equality: any NaN equals any NaN (default: compare NaN bits)");
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
    std::optional<fb::Tensor> ref;
    if (!path_ref.empty()) ref = fb::read_npy(path_ref);
    const nlohmann::json out = fb::diff_json(
        a, b, ref ? &*ref : nullptr,
        {.histogram_bins = bins,
         .nan = nan_equal ? fb::NanPolicy::AnyNanEqual : fb::NanPolicy::Bitwise,
         .zero = zeros_equal ? fb::ZeroPolicy::SignedZerosEqual : fb::ZeroPolicy::Bitwise,
         .a_name = path_a,
         .b_name = path_b,
         .ref_name = path_ref});
    if (as_json) {
      std::cout << out.dump(2) << "\n";
    } else {
      print_text(out, a, b);
    }
    return 0;
  } catch (const fb::InputError& e) {
    fmt::print(stderr, "fusebench-diff: error: {}\n", e.what());
    return kBadInput;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "fusebench-diff: error: out of memory reading or comparing {} and {}\n",
               path_a, path_b);
    return kBadInput;
  }
}
