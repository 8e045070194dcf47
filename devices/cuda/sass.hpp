// SASS evidence without a GPU: a cubin disassembled by cuobjdump -sass into its instructions and
// an opcode histogram ("FMUL", "MUFU.RSQ", "LDG.E.U16", ...; predicates dropped, modifiers kept).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fusebench::cuda {

struct SassListing {
  std::vector<std::string>
      instructions;  // "FMUL R5, R2, 0.69999998807907104492" (no predicate, no ';')
  std::map<std::string, int> histogram;  // opcode with modifiers -> count
  std::string tool;                      // the disassembler's path
  // instructions whose opcode starts with the prefix
  int count(const std::string& opcode_prefix) const;
  // Instructions of `opcode` (modifiers allowed) whose last operand is an immediate or a
  // constant-bank operand c[..][..]: a scalar the instruction carries instead of loading it.
  int constant_operand_count(const std::string& opcode) const;
  nlohmann::json to_json() const;  // {"histogram": ..., "instructions": n, "tool": ...}
};

// The cuobjdump that disassembles: $FUSEBENCH_CUOBJDUMP, else on PATH, else in the toolkit's bin,
// else in the project's .venv (tools/bootstrap installs NVIDIA's wheel). Empty when none is found.
std::filesystem::path find_cuobjdump();

// Disassembles a cubin; InputError names the file when it cannot be read or the tool is missing.
// A cubin already disassembled by this process (same path, size and modification time) is not
// disassembled again: cuobjdump takes about a second, and a benchmark's setup runs several times.
SassListing disassemble_cubin(const std::filesystem::path& cubin);

}  // namespace fusebench::cuda
