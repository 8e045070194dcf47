// A tensor in GPU memory (contiguous), with its dtype and shape, copied from and to host Tensors.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cuda_runtime.hpp"
#include "fusebench/error.hpp"
#include "fusebench/tensor.hpp"

namespace fusebench::cuda {

class DeviceTensor {
 public:
  DeviceTensor(DType dtype, Shape shape)
      : dtype_(dtype),
        shape_(std::move(shape)),
        buffer_(std::size_t(shape_numel(shape_)) * dtype_size(dtype_)) {}
  static DeviceTensor upload(const Tensor& host) {
    const Tensor contiguous = host.contiguous();
    DeviceTensor t(host.dtype(), host.shape());
    if (t.bytes() > 0)
      check_cuda(cudaMemcpy(t.data(), contiguous.raw_data(), t.bytes(), cudaMemcpyHostToDevice),
                 "cudaMemcpy to GPU");
    return t;
  }
  Tensor download() const {
    Tensor host = Tensor::uninitialized(dtype_, shape_);
    if (bytes() > 0)
      check_cuda(cudaMemcpy(host.raw_data(), data(), bytes(), cudaMemcpyDeviceToHost),
                 "cudaMemcpy to host");
    return host;
  }
  void* data() const { return buffer_.data(); }
  std::size_t bytes() const { return buffer_.bytes(); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }

 private:
  DType dtype_;
  Shape shape_;
  DeviceBuffer buffer_;
};

inline std::string read_binary(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input_error("cannot read {}", path.string());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace fusebench::cuda
