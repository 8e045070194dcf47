#include "gemm.hpp"

#include <algorithm>

#include "fusebench/engine/eigen.hpp"

namespace fusebench::cpu {

namespace {
// A one-row-tile GEMM's column tiles are multiples of 48, the columns Eigen's float micro-kernel
// covers per register block with AVX-512 (24 with AVX2, 12 with SSE or NEON), so that cutting the
// columns leaves every element's sum order as in one call. (Tiles of 64 or 128 changed bits where
// k = 1000: measured.)
constexpr std::int64_t kGemmColumnBlock = 48;

std::int64_t chunks(std::int64_t n, std::int64_t size) { return (n + size - 1) / size; }
}  // namespace

void gemm_f32(ThreadPool& pool, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
              const float* b, float* c) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Strided = Eigen::OuterStride<>;
  // About four column tiles: on task E's shapes four or five tiles ran as fast as two halves on
  // two threads, while many narrow tiles ran slower (each tile packs A again); four leave work for
  // a larger machine's threads.
  const std::int64_t column_tile =
      std::max(kGemmColumnBlock, n / 4 / kGemmColumnBlock * kGemmColumnBlock);
  const std::int64_t column_tiles = n / column_tile;
  if (m <= kGemmRowTile && m >= 2 && k + m >= 18 && column_tiles >= 2 &&
      !ThreadPool::inside_task()) {
    // One row tile (the weight gradients' GEMMs, m = model width) would run on one thread: its
    // columns are cut into fixed tiles instead, the last one taking the remainder. Every element
    // then goes through the micro-kernel, and gets the bits, that one call gives it: a tile starts
    // at a multiple of Eigen's register block of C's columns, and no tile is narrow enough for
    // Eigen to switch to a matrix-vector or coefficient-wise product (one column; k + rows +
    // columns < 20). GemmService.ColumnTilesGiveTheBitsOfOneCall checks it.
    Eigen::Map<const Matrix> ma(a, m, k);
    pool.parallel_for(column_tiles, [&](std::int64_t task) {
      const std::int64_t col = task * column_tile,
                         cols = task + 1 == column_tiles ? n - col : column_tile;
      Eigen::Map<const Matrix, 0, Strided> mb(b + col, k, cols, Strided(n));
      Eigen::Map<Matrix, 0, Strided> mc(c + col, m, cols, Strided(n));
      mc.noalias() = ma * mb;
    });
    return;
  }
  Eigen::Map<const Matrix> mb(b, k, n);
  pool.parallel_for(chunks(m, kGemmRowTile), [&](std::int64_t task) {
    const std::int64_t row = task * kGemmRowTile, rows = std::min(kGemmRowTile, m - row);
    Eigen::Map<const Matrix> ma(a + row * k, rows, k);
    Eigen::Map<Matrix> mc(c + row * n, rows, n);
    mc.noalias() = ma * mb;
  });
}

}  // namespace fusebench::cpu
