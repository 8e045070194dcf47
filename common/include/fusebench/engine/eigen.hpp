// Eigen, for the fp32/fp64 GEMMs of the executors. GCC 12 reports -Wmaybe-uninitialized inside
// Eigen's AVX-512 GEMM packing (`__Y` of _mm512_extractf64x4_pd: a known false positive in the
// library's code, not ours), about 60 lines for every file that uses the GEMM.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
