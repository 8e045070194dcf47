#include "fusebench/engine/recoveries.hpp"

#include <mutex>

namespace fusebench::engine {
namespace {
std::mutex recoveries_mutex;
std::map<std::string, int>& recoveries() {
  static std::map<std::string, int> counts;
  return counts;
}
}  // namespace

void record_recovery(const std::string& counter) {
  std::lock_guard lock(recoveries_mutex);
  ++recoveries()[counter];
}

std::map<std::string, int> take_recoveries() {
  std::lock_guard lock(recoveries_mutex);
  std::map<std::string, int> taken;
  taken.swap(recoveries());
  return taken;
}

}  // namespace fusebench::engine
