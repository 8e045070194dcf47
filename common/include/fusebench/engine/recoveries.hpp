// Recoveries a device made while it ran a case: faults that did not become the case's result
// because the device repaired them (a corrupt compiled artifact moved aside and its graph
// recompiled; a dead worker restarted). The device records each under a counter name; the suites'
// case wrapper (suites/support/cases.cpp) takes them after each case and reports them as that
// case's counters, so a result that needed a repair says so in the JSON.
#pragma once

#include <map>
#include <string>

namespace fusebench::engine {

// One recovery of kind `counter` (e.g. "framework_cache_recovered") in this process. Thread-safe.
void record_recovery(const std::string& counter);

// The recoveries recorded since the last call, by counter, and forgets them.
std::map<std::string, int> take_recoveries();

}  // namespace fusebench::engine
