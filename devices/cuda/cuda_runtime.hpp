// Small RAII and error helpers over the CUDA runtime and cuBLAS, shared by the executors.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace fusebench::cuda {

// A CUDA runtime or cuBLAS call that failed (what() names the call and the library's message).
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check_cuda(cudaError_t result, const char* what) {
  if (result != cudaSuccess) {
    throw CudaError(fmt::format("CUDA: {} failed: {} ({})", what, cudaGetErrorString(result),
                                cudaGetErrorName(result)));
  }
}
inline void check_cublas(cublasStatus_t result, const char* what) {
  if (result != CUBLAS_STATUS_SUCCESS)
    throw CudaError(fmt::format("cuBLAS: {} failed: {}", what, cublasGetStatusString(result)));
}

// Device memory of `bytes` bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Elapsed device time between two events recorded around the work on a stream.
class EventTimer {
 public:
  EventTimer() {
    check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(cudaStream_t s) { check_cuda(cudaEventRecord(start_, s), "cudaEventRecord"); }
  double stop_ms(cudaStream_t s) {
    check_cuda(cudaEventRecord(stop_, s), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return double(ms);
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

// A device-to-device copy of `bytes` on the default stream (the executors' and cuBLAS's), timed by
// events as their kernels are: the GPU's own bandwidth yardstick, its traffic twice the bytes
// (each read once and written once).
class DeviceCopy {
 public:
  explicit DeviceCopy(std::size_t bytes) : source_(bytes), destination_(bytes) {
    check_cuda(cudaMemset(source_.data(), 1, bytes), "cudaMemset");
  }
  std::size_t bytes() const { return source_.bytes(); }
  double run_seconds() {
    timer_.start(nullptr);
    check_cuda(cudaMemcpyAsync(destination_.data(), source_.data(), bytes(),
                               cudaMemcpyDeviceToDevice, nullptr),
               "cudaMemcpyAsync");
    return timer_.stop_ms(nullptr) * 1e-3;
  }

 private:
  DeviceBuffer source_, destination_;
  EventTimer timer_;
};

}  // namespace fusebench::cuda
