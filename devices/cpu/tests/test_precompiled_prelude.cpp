// The JIT's precompiled kernel prelude (jit_compiler.hpp): built once per cache and flags, really
// used by the compiler, invisible in the results, and never fatal when its .gch is damaged.
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "engine_test_support.hpp"
#include "fusebench/engine/kernel_cache.hpp"
#include "fusebench/hash.hpp"
#include "jit_compiler.hpp"

namespace fusebench {
namespace {
namespace fs = std::filesystem;

using testsupport::fresh_dir;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The folders of <cache>/pch/.
std::vector<fs::path> prelude_folders(const fs::path& cache) {
  std::vector<fs::path> out;
  std::error_code error;
  const fs::path shared = cache / engine::kKernelCacheSharedFolder;
  if (!fs::is_directory(shared, error)) return out;
  for (const auto& entry : fs::directory_iterator(shared))
    if (entry.is_directory()) out.push_back(entry.path());
  return out;
}

std::string build_log(const engine::KernelTrace& kernel) {
  return read_text(fs::path(kernel.artifact_path).replace_extension(".log"));
}

// Runs `chain` through a fused executor on `cache`, with the precompiled prelude on or off.
engine::RunResult run_fused(const testsupport::ElementwiseChain& chain, const fs::path& cache,
                            bool precompiled) {
  if (precompiled)
    ::unsetenv("FUSEBENCH_JIT_PCH");
  else
    ::setenv("FUSEBENCH_JIT_PCH", "0", 1);
  auto result = cpu::FusedExecutor({}, cache).run(chain.graph, chain.inputs);
  ::unsetenv("FUSEBENCH_JIT_PCH");
  return result;
}

TEST(PrecompiledPrelude, TwoKernelsShareOneThatTheCompilerReallyUses) {
  const auto dir = fresh_dir("pch-shared");
  testsupport::ElementwiseChain first(DType::f16, {256}, 1), second(DType::bf16, {512}, 2);
  const auto one = run_fused(first, dir, true);
  ASSERT_EQ(one.trace.size(), 1u);
  const auto folders = prelude_folders(dir);
  ASSERT_EQ(folders.size(), 1u);
  const fs::path header = folders[0] / "prelude.hpp";
  const fs::path gch = fs::path(header).concat(".gch");
  ASSERT_TRUE(fs::is_regular_file(gch));
  // Proof of use: with the header's text made uncompilable, only a compiler that reads the .gch
  // instead of the header builds the second kernel on its first try.
  const std::string prelude = read_text(header);
  std::ofstream(header) << "#error the precompiled prelude was not used\n";
  const auto two = run_fused(second, dir, true);
  ASSERT_EQ(two.trace.size(), 1u);
  EXPECT_FALSE(two.trace[0].cache_hit);
  EXPECT_NE(one.trace[0].cache_key, two.trace[0].cache_key);
  EXPECT_EQ(prelude_folders(dir).size(), 1u);
  EXPECT_TRUE(fs::is_regular_file(gch)) << "the .gch was discarded";
  for (const auto* run : {&one, &two}) {
    const std::string log = build_log(run->trace[0]);
    EXPECT_EQ(log.find("Winvalid-pch"), std::string::npos) << log;
    EXPECT_EQ(log.find("PCH"), std::string::npos) << log;
    EXPECT_EQ(log.find("was not used"), std::string::npos) << log;
    EXPECT_NE(log.find(fmt::format("! {}", gch.string())), std::string::npos) << log;
    // the cached source is the whole, self-contained text
    EXPECT_NE(read_text(run->trace[0].source_path).find(prelude), std::string::npos);
  }
  fs::remove_all(dir);
}

TEST(PrecompiledPrelude, KernelsAreByteIdenticalWithAndWithoutIt) {
  const auto with_dir = fresh_dir("pch-with"), without_dir = fresh_dir("pch-without");
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    testsupport::ElementwiseChain chain(dtype, {300}, 5);
    const auto with = run_fused(chain, with_dir, true);
    const auto without = run_fused(chain, without_dir, false);
    ASSERT_EQ(with.trace.size(), 1u);
    ASSERT_EQ(without.trace.size(), 1u);
    EXPECT_EQ(with.trace[0].cache_key, without.trace[0].cache_key);
    EXPECT_EQ(read_text(with.trace[0].source_path), read_text(without.trace[0].source_path));
    EXPECT_EQ(with.trace[0].artifact_sha256, without.trace[0].artifact_sha256) << dtype_name(dtype);
    EXPECT_EQ(tensor_md5_hex(with.outputs[0]), tensor_md5_hex(without.outputs[0]))
        << dtype_name(dtype);
  }
  EXPECT_EQ(prelude_folders(with_dir).size(), 1u);
  EXPECT_TRUE(prelude_folders(without_dir).empty());
  fs::remove_all(with_dir);
  fs::remove_all(without_dir);
}

TEST(PrecompiledPrelude, ATruncatedGchIsNotFatal) {
  const auto dir = fresh_dir("pch-truncated"), reference_dir = fresh_dir("pch-reference");
  testsupport::ElementwiseChain first(DType::f16, {256}, 1), second(DType::bf16, {512}, 2);
  run_fused(first, dir, true);
  const auto folders = prelude_folders(dir);
  ASSERT_EQ(folders.size(), 1u);
  const fs::path gch = folders[0] / "prelude.hpp.gch";
  // a new, truncated file in its place (as a killed writer without the rename would leave)
  fs::copy_file(gch, fs::path(gch).concat(".cut"));
  fs::resize_file(fs::path(gch).concat(".cut"), fs::file_size(gch) / 2);
  fs::rename(fs::path(gch).concat(".cut"), gch);
  const auto damaged = run_fused(second, dir, true);
  const auto reference = run_fused(second, reference_dir, false);
  ASSERT_EQ(damaged.trace.size(), 1u);
  EXPECT_FALSE(damaged.trace[0].cache_hit);
  EXPECT_NE(build_log(damaged.trace[0]).find("PCH"), std::string::npos)
      << "the compiler's complaint belongs in the kernel's build log: "
      << build_log(damaged.trace[0]);
  EXPECT_EQ(damaged.trace[0].artifact_sha256, reference.trace[0].artifact_sha256);
  EXPECT_EQ(tensor_md5_hex(damaged.outputs[0]), tensor_md5_hex(reference.outputs[0]));
  EXPECT_FALSE(fs::exists(gch)) << "the damaged .gch is left for the next process to use";
  fs::remove_all(dir);
  fs::remove_all(reference_dir);
}

}  // namespace
}  // namespace fusebench
