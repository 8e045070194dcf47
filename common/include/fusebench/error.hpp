// Errors thrown by fusebench. Every message names what was wrong: the op or function, the shapes,
// the dtype, the file or the flag, so that a user can act on it without a debugger.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace fusebench {

// Bad input from a user: a malformed file, mismatched shapes, an unsupported dtype, an invalid
// option. Command-line tools map it to exit status 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void throw_input_error(fmt::format_string<Args...> format, Args&&... args) {
  throw InputError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace fusebench
