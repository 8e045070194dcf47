// A fixed pool of worker threads for kernels. Work is cut into tasks by the kernel (fixed tile
// sizes, never by thread count), so results do not depend on how many threads run them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fusebench::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs fn(task) for task in [0, tasks) and returns when all are done. The calling thread works
  // too. Exceptions from a task are rethrown here (the first one). Called from inside a task (a
  // fused kernel's tile task calling the GEMM service), it runs the tasks inline: the pool holds
  // one job at a time.
  void parallel_for(std::int64_t tasks, const std::function<void(std::int64_t)>& fn);
  // True on a thread that is running one of a pool's tasks.
  static bool inside_task();
  int threads() const { return int(workers_.size()) + 1; }

 private:
  void worker_loop();
  void drain();  // take tasks of the current job until none is left
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t)>* job_ = nullptr;
  std::int64_t next_ = 0, total_ = 0, finished_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace fusebench::cpu
