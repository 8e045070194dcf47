// A warp on the host: 32 threads run one function in lockstep at every shuffle, so that the warp
// reductions of warp_rows.cuh run here as their own text and can be compared with the CPU
// engine's scalar_math.hpp bit for bit. Each shuffle is a write of the lane's value, a barrier, a
// read of the partner lane's value and a barrier (the next shuffle may not overwrite it early).
#pragma once

#include <array>
#include <barrier>
#include <cstring>
#include <functional>
#include <thread>
#include <type_traits>
#include <vector>

namespace fusebench::cuda::testing {

class EmulatedWarp {
 public:
  static constexpr int kLanes = 32;
  struct Exchange {
    std::barrier<> barrier{kLanes};
    std::array<std::array<unsigned char, 8>, kLanes> slots{};
  };
  EmulatedWarp(int lane, Exchange& exchange) : lane_(lane), exchange_(&exchange) {}
  int lane() const { return lane_; }
  // __shfl_down_sync(mask, v, width): lane + width's value, or the lane's own past the last lane.
  template <class C>
  C down(C v, int width) const {
    return exchange(v, lane_ + width < kLanes ? lane_ + width : lane_);
  }
  // __shfl_sync(mask, v, 0)
  template <class C>
  C first(C v) const {
    return exchange(v, 0);
  }

 private:
  template <class C>
  C exchange(C v, int source) const {
    static_assert(std::is_trivially_copyable_v<C> && sizeof(C) <= 8);
    std::memcpy(exchange_->slots[std::size_t(lane_)].data(), &v, sizeof(C));
    exchange_->barrier.arrive_and_wait();
    C out;
    std::memcpy(&out, exchange_->slots[std::size_t(source)].data(), sizeof(C));
    exchange_->barrier.arrive_and_wait();
    return out;
  }
  int lane_;
  Exchange* exchange_;
};

// Runs lane_function(warp) on the 32 lanes of one emulated warp and returns each lane's result.
template <class Result>
std::vector<Result> run_warp(const std::function<Result(const EmulatedWarp&)>& lane_function) {
  EmulatedWarp::Exchange exchange;
  std::vector<Result> results(EmulatedWarp::kLanes);
  {
    std::vector<std::jthread> lanes;
    for (int l = 0; l < EmulatedWarp::kLanes; ++l) {
      lanes.emplace_back(
          [&, l] { results[std::size_t(l)] = lane_function(EmulatedWarp(l, exchange)); });
    }
  }
  return results;
}

}  // namespace fusebench::cuda::testing
