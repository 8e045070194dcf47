// The allocator behind every tensor and every large scratch buffer of the toolkit: one cache of
// freed blocks, with one limit (see allocate_buffer in tensor.hpp).
#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <list>
#include <mutex>
#include <new>
#include <vector>

#include <sys/mman.h>

#include "fusebench/tensor.hpp"

namespace fusebench {

namespace {
// The toolkit's one cache of freed large buffers, as a framework's caching allocator keeps them:
// tensors, the CPU device's scratch and error_stats' kept values all allocate through it. A run
// that allocates its outputs again then finds pages that are already mapped, instead of a page
// fault and a kernel zero-fill per page, which would dominate a memory-bound comparison and is not
// what a framework's steady state pays.
// The limit policy, the only one:
//   - blocks of 1 MiB or more (after rounding, see rounded_size) are kept when released; smaller
//     ones go back to the C heap, which keeps its own;
//   - a kept block is reused only at its exact rounded size;
//   - together the kept blocks hold at most FUSEBENCH_BUFFER_CACHE_MB MiB (default 1024); a
//     released block that does not fit evicts the blocks released longest ago, and one larger than
//     the whole limit is freed at once.
// Oldest first: a run's own working set cycles through the cache, while the buffers of a one-off
// computation (an fp64 reference, say) would otherwise fill it for good and turn every later run
// back into page faults.
class LargeBufferCache {
 public:
  static constexpr std::size_t kMinimumBytes = std::size_t(1) << 20;

  static LargeBufferCache& instance() {
    // never destroyed: tensors in statics outlive any order
    static auto* cache = new LargeBufferCache();
    return *cache;
  }
  void* take(std::size_t bytes) {
    const std::lock_guard lock(mutex_);
    // The most recently freed buffer of this size: its pages are the likeliest still in cache.
    const auto it = std::find_if(free_.rbegin(), free_.rend(),
                                 [bytes](const Entry& e) { return e.bytes == bytes; });
    if (it == free_.rend()) return nullptr;
    void* memory = it->memory;
    free_.erase(std::next(it).base());
    cached_bytes_ -= bytes;
    return memory;
  }
  void give(void* memory, std::size_t bytes) {
    std::vector<void*> evicted;
    {
      const std::lock_guard lock(mutex_);
      if (bytes > limit_bytes_) {
        evicted.push_back(memory);
      } else {
        while (cached_bytes_ + bytes > limit_bytes_) {
          evicted.push_back(free_.front().memory);
          cached_bytes_ -= free_.front().bytes;
          free_.pop_front();
        }
        free_.push_back({bytes, memory});
        cached_bytes_ += bytes;
      }
    }
    for (void* old : evicted) std::free(old);  // outside the lock: unmapping is slow
  }
  BufferCacheState state() {
    const std::lock_guard lock(mutex_);
    return {cached_bytes_, limit_bytes_};
  }

 private:
  struct Entry {
    std::size_t bytes;
    void* memory;
  };
  LargeBufferCache() {
    if (const char* env = std::getenv("FUSEBENCH_BUFFER_CACHE_MB"); env && *env) {
      limit_bytes_ = std::size_t(std::strtoull(env, nullptr, 10)) << 20;
    }
  }
  std::mutex mutex_;
  std::list<Entry> free_;  // oldest first
  std::size_t cached_bytes_ = 0;
  std::size_t limit_bytes_ = std::size_t(1024) << 20;
};

constexpr std::size_t kHugePage = std::size_t(2) << 20;
// Large buffers are aligned to 2 MiB and offered to transparent huge pages: a fresh 64 MiB
// buffer otherwise costs 16k page faults.
std::size_t alignment_for(std::size_t bytes) { return bytes >= 2 * kHugePage ? kHugePage : 64; }
std::size_t rounded_size(std::size_t bytes) {
  const std::size_t alignment = alignment_for(bytes);
  return std::max<std::size_t>(alignment, (bytes + alignment - 1) / alignment * alignment);
}

}  // namespace

void* allocate_buffer(std::size_t bytes) {
  const std::size_t rounded = rounded_size(bytes);
  void* memory = rounded >= LargeBufferCache::kMinimumBytes
                     ? LargeBufferCache::instance().take(rounded)
                     : nullptr;
  if (memory == nullptr) {
    memory = std::aligned_alloc(alignment_for(bytes), rounded);
    if (memory == nullptr) throw std::bad_alloc();
    if (alignment_for(bytes) == kHugePage) ::madvise(memory, rounded, MADV_HUGEPAGE);
  }
  return memory;
}

BufferCacheState buffer_cache_state() { return LargeBufferCache::instance().state(); }

void release_buffer(void* memory, std::size_t bytes) {
  const std::size_t rounded = rounded_size(bytes);
  if (rounded >= LargeBufferCache::kMinimumBytes) {
    LargeBufferCache::instance().give(memory, rounded);
  } else {
    std::free(memory);
  }
}

}  // namespace fusebench
