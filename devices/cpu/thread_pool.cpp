#include "thread_pool.hpp"

namespace fusebench::cpu {

namespace {
thread_local bool running_task = false;
}  // namespace

bool ThreadPool::inside_task() { return running_task; }

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::drain() {
  std::unique_lock lock(mutex_);
  while (job_ != nullptr && next_ < total_) {
    const std::int64_t task = next_++;
    const auto* job = job_;
    lock.unlock();
    try {
      running_task = true;
      (*job)(task);
      running_task = false;
    } catch (...) {
      running_task = false;
      std::lock_guard error_lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    if (++finished_ == total_) done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    drain();
  }
}

void ThreadPool::parallel_for(std::int64_t tasks, const std::function<void(std::int64_t)>& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1 || running_task) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    next_ = 0;
    total_ = tasks;
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  drain();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return finished_ == total_; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace fusebench::cpu
