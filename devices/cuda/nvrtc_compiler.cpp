#include "nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nvrtc.h>

#include <fstream>
#include <memory>
#include <regex>

#include "fusebench/error.hpp"
#include "fusebench/npy.hpp"

namespace fusebench::cuda {

namespace fs = std::filesystem;

namespace {
void check(nvrtcResult result, const char* what) {
  if (result != NVRTC_SUCCESS)
    throw engine::CompileError(
        fmt::format("NVRTC: {} failed: {}", what, nvrtcGetErrorString(result)));
}
struct ProgramDeleter {
  void operator()(nvrtcProgram* p) const {
    nvrtcDestroyProgram(p);
    delete p;
  }
};
}  // namespace

std::string nvrtc_identity() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return fmt::format("NVRTC {}.{}", major, minor);
}

std::vector<std::string> nvrtc_options(const std::string& arch, bool fma_contraction) {
  static const std::regex valid("sm_[0-9]{2,3}[af]?");
  if (!std::regex_match(arch, valid)) {
    throw_input_error("CUDA: architecture '{}' is not of the form sm_NN (e.g. sm_80, sm_90)", arch);
  }
  return {"--gpu-architecture=" + arch,
          "-std=c++20",
          "--device-as-default-execution-space",
          "--ftz=false",
          "--prec-div=true",
          "--prec-sqrt=true",
          fma_contraction ? "--fmad=true" : "--fmad=false"};
}

engine::CachedArtifact compile_cubin(const std::string& source, const std::string& arch,
                                     bool fma_contraction, engine::KernelCache& cache) {
  const std::vector<std::string> options = nvrtc_options(arch, fma_contraction);
  const std::string command = fmt::format("nvrtc {}", fmt::join(options, " "));
  return cache.get_or_build(
      source, command, nvrtc_identity(),
      [&](const fs::path& source_path, const fs::path& cubin_path, const fs::path& log_path) {
        std::unique_ptr<nvrtcProgram, ProgramDeleter> program(new nvrtcProgram{});
        check(nvrtcCreateProgram(program.get(), source.c_str(), source_path.filename().c_str(), 0,
                                 nullptr, nullptr),
              "nvrtcCreateProgram");
        std::vector<const char*> argv;
        for (const auto& o : options) argv.push_back(o.c_str());
        const nvrtcResult compiled = nvrtcCompileProgram(*program, int(argv.size()), argv.data());
        std::size_t log_size = 0;
        check(nvrtcGetProgramLogSize(*program, &log_size), "nvrtcGetProgramLogSize");
        std::string log(log_size, '\0');
        if (log_size > 0) check(nvrtcGetProgramLog(*program, log.data()), "nvrtcGetProgramLog");
        while (!log.empty() && log.back() == '\0') log.pop_back();
        write_file_atomically(log_path, log);
        if (compiled != NVRTC_SUCCESS) {
          throw engine::CompileError(fmt::format("NVRTC failed ({}) on {} with {}:\n{}",
                                                 nvrtcGetErrorString(compiled),
                                                 source_path.string(), command, log));
        }
        std::size_t size = 0;
        check(nvrtcGetCUBINSize(*program, &size), "nvrtcGetCUBINSize");
        std::string cubin(size, '\0');
        check(nvrtcGetCUBIN(*program, cubin.data()), "nvrtcGetCUBIN");
        write_file_atomically(cubin_path, cubin);
      },
      ".cu", ".cubin");
}

}  // namespace fusebench::cuda
