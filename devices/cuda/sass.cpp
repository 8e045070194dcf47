#include "sass.hpp"

#include <fmt/format.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>

#include "fusebench/error.hpp"

namespace fusebench::cuda {

namespace fs = std::filesystem;

int SassListing::count(const std::string& prefix) const {
  int n = 0;
  for (const auto& [opcode, c] : histogram) {
    if (opcode.rfind(prefix, 0) == 0) n += c;
  }
  return n;
}

int SassListing::constant_operand_count(const std::string& opcode) const {
  const std::regex pattern(
      "^" + opcode +
      R"((\.[A-Z0-9_]+)* [^,]+, [^,]+, (-?[0-9][0-9.e+-]*|-?c\[0x[0-9a-f]+\]\[0x[0-9a-f]+\])$)");
  int n = 0;
  for (const auto& i : instructions) n += std::regex_match(i, pattern) ? 1 : 0;
  return n;
}

nlohmann::json SassListing::to_json() const {
  return {{"histogram", histogram}, {"instructions", instructions.size()}, {"tool", tool}};
}

fs::path find_cuobjdump() {
  std::error_code error;
  if (const char* env = std::getenv("FUSEBENCH_CUOBJDUMP"); env && *env) return env;
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    std::size_t start = 0;
    while (start <= dirs.size()) {
      const std::size_t end = std::min(dirs.find(':', start), dirs.size());
      const fs::path candidate = fs::path(dirs.substr(start, end - start)) / "cuobjdump";
      if (end > start && fs::is_regular_file(candidate, error)) return candidate;
      start = end + 1;
    }
  }
  if (fs::path toolkit = fs::path(FUSEBENCH_CUDA_BIN_DIR) / "cuobjdump";
      fs::is_regular_file(toolkit, error))
    return toolkit;
  const fs::path venv_lib = fs::path(FUSEBENCH_SOURCE_DIR) / ".venv" / "lib";
  if (fs::is_directory(venv_lib, error)) {
    for (const auto& python : fs::directory_iterator(venv_lib, error)) {
      for (const char* cu : {"cu13", "cu12"}) {
        const fs::path candidate =
            python.path() / "site-packages" / "nvidia" / cu / "bin" / "cuobjdump";
        if (fs::is_regular_file(candidate, error)) return candidate;
      }
    }
  }
  return {};
}

namespace {
SassListing run_cuobjdump(const fs::path& cubin) {
  SassListing listing;
  const fs::path tool = find_cuobjdump();
  if (tool.empty()) {
    throw_input_error(
        "SASS: no cuobjdump found (set FUSEBENCH_CUOBJDUMP, put it on PATH or run tools/bootstrap) "
        "for {}",
        cubin.string());
  }
  listing.tool = tool.string();
  const std::string command = fmt::format("'{}' -sass '{}' 2>&1", tool.string(), cubin.string());
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw_input_error("SASS: cannot run {}", command);
  std::string output;
  std::array<char, 4096> chunk;
  while (std::size_t got = std::fread(chunk.data(), 1, chunk.size(), pipe))
    output.append(chunk.data(), got);
  const int status = ::pclose(pipe);
  if (status != 0) throw_input_error("SASS: {} failed (status {}):\n{}", command, status, output);
  // "        /*0050*/                   @!P0 FMUL R5, R2, 0.69999998807907104492 ;   /* 0x... */"
  static const std::regex instruction(
      R"(^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]+\s+)?([^;]*?)\s*;)");
  std::size_t start = 0;
  while (start < output.size()) {
    const std::size_t end = std::min(output.find('\n', start), output.size());
    const std::string line = output.substr(start, end - start);
    std::smatch match;
    if (std::regex_search(line, match, instruction)) {
      const std::string text = match[1].str();
      listing.instructions.push_back(text);
      ++listing.histogram[text.substr(0, text.find(' '))];
    }
    start = end + 1;
  }
  if (listing.instructions.empty())
    throw_input_error("SASS: {} printed no instructions for {}:\n{}", tool.string(), cubin.string(),
                      output);
  return listing;
}
}  // namespace

SassListing disassemble_cubin(const fs::path& cubin) {
  std::error_code error;
  if (!fs::is_regular_file(cubin, error))
    throw_input_error("SASS: cubin {} does not exist", cubin.string());
  const std::string key =
      fmt::format("{}|{}|{}", fs::absolute(cubin).string(), fs::file_size(cubin, error),
                  fs::last_write_time(cubin, error).time_since_epoch().count());
  static std::mutex mutex;
  static std::map<std::string, SassListing> listed;
  {
    std::lock_guard lock(mutex);
    if (auto found = listed.find(key); found != listed.end()) return found->second;
  }
  SassListing listing = run_cuobjdump(cubin);
  std::lock_guard lock(mutex);
  return listed.emplace(key, std::move(listing)).first->second;
}

}  // namespace fusebench::cuda
