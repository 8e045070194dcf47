// A tensor: dtype, shape, strides and a shared, 64-byte aligned buffer. Copies share the buffer
// (views); clone() and contiguous() copy. Shapes are row-major ("C order").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fusebench/dtype.hpp"
#include "fusebench/error.hpp"

namespace fusebench {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[8, 2048, 4096]"
Shape contiguous_strides(const Shape& shape);  // in elements

// Raw memory from the allocator behind every tensor and the toolkit's large scratch buffers:
// 64-byte aligned (2 MiB from 4 MiB up); blocks of 1 MiB or more are kept after release and reused
// at their exact size (FUSEBENCH_BUFFER_CACHE_MB caps the cache, default 1024; when full, the
// blocks released longest ago are freed first). release_buffer takes the size that was allocated.
void* allocate_buffer(std::size_t bytes);
void release_buffer(void* memory, std::size_t bytes);
struct BufferCacheState {
  std::size_t cached_bytes;  // held for reuse now
  std::size_t limit_bytes;
};
BufferCacheState buffer_cache_state();

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled contiguous tensor.
  Tensor(DType dtype, Shape shape);
  // Contiguous tensor whose contents are left as the allocator gives them: for outputs that are
  // written in full right away.
  static Tensor uninitialized(DType dtype, Shape shape);
  template <class T>
  static Tensor from_values(Shape shape, std::span<const T> values);
  // A view of memory that someone else owns (a numpy array, a DLPack tensor): no copy. `owner`
  // is kept alive while any view of the result exists. Strides are in elements and must not be
  // negative; the memory need not be aligned.
  static Tensor borrow(DType dtype, Shape shape, Shape strides, const void* data,
                       std::shared_ptr<const void> owner);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return int(shape_.size()); }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t element_size() const { return dtype_size(dtype_); }
  std::size_t nbytes() const { return std::size_t(numel()) * element_size(); }
  bool is_contiguous() const;
  bool defined() const { return storage_ != nullptr; }
  std::string describe() const;  // "f16[1024, 1024]"

  std::byte* raw_data() { return storage_.get() + offset_bytes_; }
  const std::byte* raw_data() const { return storage_.get() + offset_bytes_; }
  // Typed view of a contiguous tensor; throws if T does not match the dtype or the tensor is a
  // strided view.
  template <class T>
  std::span<T> span();
  template <class T>
  std::span<const T> span() const;
  std::span<const std::byte> bytes() const;

  // ---- views (share the buffer)
  Tensor reshape(Shape new_shape) const;  // contiguous tensors only; one -1 is inferred
  Tensor permute(const std::vector<int>& order) const;
  Tensor transpose(int axis_a, int axis_b) const;
  Tensor slice(int axis, std::int64_t start, std::int64_t stop) const;
  Tensor expand(const Shape& shape) const;  // numpy broadcast to shape (stride 0 on stretched axes)

  // ---- copies
  Tensor contiguous() const;  // this, if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  // Exact conversion between dtypes (floating narrowing rounds to nearest even).
  Tensor to(DType dtype) const;

  // Element i of the row-major order as a double (exact for every floating dtype), for tests and
  // error messages, not for loops.
  double value_at(std::int64_t flat_index) const;
  // The raw bits of element i, zero-extended.
  std::uint64_t bits_at(std::int64_t flat_index) const;

 private:
  std::shared_ptr<std::byte[]> storage_;
  std::size_t offset_bytes_ = 0;
  DType dtype_ = DType::f32;
  Shape shape_;
  Shape strides_;
};

// Throws InputError unless a and b have the same dtype and shape; `what` names the operation.
void check_same_dtype_and_shape(const Tensor& a, const Tensor& b, std::string_view what);
void check_same_shape(const Tensor& a, const Tensor& b, std::string_view what);

template <class T>
Tensor Tensor::from_values(Shape shape, std::span<const T> values) {
  Tensor out = uninitialized(dtype_of<T>, std::move(shape));
  if (std::int64_t(values.size()) != out.numel()) {
    throw_input_error("Tensor::from_values: {} values for shape {} ({} elements)", values.size(),
                      shape_string(out.shape_), out.numel());
  }
  std::copy(values.begin(), values.end(), out.span<T>().begin());
  return out;
}

template <class T>
std::span<T> Tensor::span() {
  if (dtype_of<T> != dtype_) {
    throw_input_error("Tensor::span: requested {} elements from a {} tensor",
                      dtype_name(dtype_of<T>), describe());
  }
  if (!is_contiguous()) throw_input_error("Tensor::span: {} is a strided view", describe());
  return {reinterpret_cast<T*>(raw_data()), std::size_t(numel())};
}

template <class T>
std::span<const T> Tensor::span() const {
  return const_cast<Tensor*>(this)->span<T>();
}

}  // namespace fusebench
