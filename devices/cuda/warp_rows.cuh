// Row reductions by one warp, in the CPU engine's order: the GPU row kernels (the fused emitter's
// fb_rowwise and the eager row kernel) give a row to a warp instead of a thread, and must still
// sum exactly as scalar_math.hpp's tiled_sum_of does, so that cuda and cpu results stay bit-equal.
//
// tiled_sum_of's order: tiles of `tile` elements summed in order into `total`; within a tile,
// element j goes to lane j mod 32, each lane adds its elements in increasing order, and the 32
// lanes combine as a pairwise tree (lane l += lane l + width, width 16, 8, 4, 2, 1). With lane l
// of a warp as lane l of that array, the per-lane sums are the same additions in the same order,
// and the tree is __shfl_down_sync by `width` with the lanes below `width` adding. Every lane
// ends with the same total (lane 0's tile sum broadcast).
//
// row_max's order is not kept (each lane takes the maximum of its own elements, then a tree):
// a maximum's value does not depend on its order, except which of +0 / -0 and which NaN payload
// is returned. Softmax reads the maximum only through x - max and exp, where +0 and -0 give the
// same bits, and a NaN row is NaN either way.
//
// The functions take the warp as a policy object (lane(), down(v, width), first(v)), so that the
// same text runs on a GPU (CudaWarp below) and on the host, where the tests run it on 32 threads
// in lockstep (tests/warp_emulation.hpp) and compare it with scalar_math.hpp bit for bit.
//
// This file is included by host code and the eager kernels (after scalar_math.hpp or
// device_math.cuh), and its text below the marker is pasted into every fused CUDA kernel.
#pragma once

// ---- kernel text (pasted from the next line to the end of the file)
#if defined(__CUDACC__)
#define FBW_HD __host__ __device__
#else
#define FBW_HD
#endif

namespace fbw {

inline constexpr int kWarpLanes = 32;  // = fbk::kReduceLanes

// N consecutive elements moved as one access: 16-byte aligned (8 or 4 for a smaller vector), so
// that a load or store of one is LDG.E.128 / STG.E.128 (two of them for 32 bytes).
template <class T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Vec {
  T v[N];
};

#if defined(__CUDACC__)
// The warp a GPU thread is in: every lane of the warp calls each function together.
struct CudaWarp {
  int lane_index;
  __device__ int lane() const { return lane_index; }
  template <class C>
  __device__ C down(C v, int width) const {
    return __shfl_down_sync(0xffffffffu, v, width);
  }
  template <class C>
  __device__ C first(C v) const {
    return __shfl_sync(0xffffffffu, v, 0);
  }
};
#endif

// The maximum that propagates NaN (scalar_math's row_max comparison).
template <class C>
FBW_HD C nan_max(C m, C v) {
  return (v > m || v != v) ? v : m;
}

// tiled_sum_of(n, tile, round, value) of scalar_math.hpp, by a warp: lane l adds value(i) for
// the i of each tile at l, l + 32, ...; returns the total in every lane.
template <class C, class Warp, class Round, class Value>
FBW_HD C tiled_sum_of(const Warp& warp, long long n, long long tile, Round round, Value value) {
  const int lane = warp.lane();
  C total = 0;
  for (long long start = 0; start < n; start += tile) {
    const long long end = start + tile < n ? start + tile : n;
    C acc = 0;
    for (long long i = start + lane; i < end; i += kWarpLanes) acc = round(acc + value(i));
    for (int width = kWarpLanes / 2; width >= 1; width /= 2) {
      const C other = warp.down(acc, width);
      if (lane < width) acc = round(acc + other);
    }
    total = round(total + warp.first(acc));
  }
  return total;
}

// The maximum of x[0, n) (NaN if any is NaN), in every lane.
template <class C, class Warp>
FBW_HD C row_max(const Warp& warp, const C* x, long long n) {
  C m = -INFINITY;
  for (long long i = warp.lane(); i < n; i += kWarpLanes) m = nan_max(m, x[i]);
  for (int width = kWarpLanes / 2; width >= 1; width /= 2) {
    const C other = warp.down(m, width);
    if (warp.lane() < width) m = nan_max(m, other);
  }
  return warp.first(m);
}

// Layer normalisation's row statistics as scalar_math's layernorm_row computes them: the mean and
// r = rsqrt(var + eps), each a tiled sum divided by n. The row's element i is then
// layernorm_element(x[i], mean, r, w[i], b[i]).
template <class C>
struct RowStatistics {
  C mean, r;
};
template <class C, class Warp, class Round, class Rsqrt>
FBW_HD RowStatistics<C> layernorm_statistics(const Warp& warp, const C* x, long long n,
                                             long long tile, C eps, Round round, Rsqrt rsqrt) {
  const C mean = tiled_sum_of<C>(warp, n, tile, round, [x](long long i) { return x[i]; }) / C(n);
  const C var = tiled_sum_of<C>(warp, n, tile, round,
                                [x, mean](long long i) { return (x[i] - mean) * (x[i] - mean); }) /
                C(n);
  return {mean, rsqrt(var + eps)};
}
template <class C>
FBW_HD C layernorm_element(C x, RowStatistics<C> s, C w, C b) {
  return ((x - s.mean) * s.r) * w + b;
}

// Softmax's first part as scalar_math's softmax_exp_row: x[i] becomes exp(x[i] - max) in place
// (each element is read and written by its own lane), and the sum of the exponentials in the
// tiled order is returned in every lane. The row's element i is then x[i] * inverse, with
// inverse = div(1, sum) (softmax_row).
template <class C, class Warp, class Round>
FBW_HD C softmax_exp(const Warp& warp, C* x, long long n, long long tile, Round round) {
  const C m = row_max(warp, x, n);
  return tiled_sum_of<C>(warp, n, tile, round, [x, m](long long i) {
    return x[i] = fbk::exp_c<fbk::ExpArgument::AtMost43>(x[i] - m);
  });
}

}  // namespace fbw
