// The thread fan-out of error_stats' passes (internal to the toolkit library).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fusebench::error_stats_internal {

// Runs work(worker, chunk) for every chunk on `threads` workers (the caller is worker 0), each
// chunk exactly once; rethrows the first exception.
template <class Work>
void for_each_chunk(std::int64_t chunks, int threads, Work&& work) {
  std::atomic<std::int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&](int w) {
    try {
      for (std::int64_t c = next++; c < chunks; c = next++) work(w, c);
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = chunks;
    }
  };
  std::vector<std::jthread> helpers;
  for (int w = 1; w < threads; ++w) helpers.emplace_back(worker, w);
  worker(0);
  helpers.clear();  // joins
  if (failure) std::rethrow_exception(failure);
}

}  // namespace fusebench::error_stats_internal
