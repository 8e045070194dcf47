#include "fusebench/tensor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <numeric>

namespace fusebench {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto extent : shape) n *= extent;
  return n;
}

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

namespace {
std::shared_ptr<std::byte[]> allocate_aligned(std::size_t bytes) {
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(allocate_buffer(bytes)),
                                      [bytes](std::byte* p) { release_buffer(p, bytes); });
}
}  // namespace

namespace {
void check_shape(const Shape& shape, std::string_view what) {
  for (auto extent : shape) {
    if (extent < 0) throw_input_error("{}: negative extent in shape {}", what, shape_string(shape));
  }
}
}  // namespace

Tensor Tensor::uninitialized(DType dtype, Shape shape) {
  check_shape(shape, "Tensor");
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.storage_ = allocate_aligned(t.nbytes());
  return t;
}

Tensor Tensor::borrow(DType dtype, Shape shape, Shape strides, const void* data,
                      std::shared_ptr<const void> owner) {
  check_shape(shape, "Tensor::borrow");
  if (strides.size() != shape.size()) {
    throw_input_error("Tensor::borrow: {} strides for shape {}", strides.size(),
                      shape_string(shape));
  }
  for (auto stride : strides) {
    if (stride < 0)
      throw_input_error("Tensor::borrow: negative stride for shape {}", shape_string(shape));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  // Aliasing constructor: shares owner's control block, points at the borrowed bytes. The tensor
  // API is non-const throughout; callers that borrow read-only memory only read it.
  t.storage_ = std::shared_ptr<std::byte[]>(std::const_pointer_cast<void>(owner),
                                            static_cast<std::byte*>(const_cast<void*>(data)));
  return t;
}

Tensor::Tensor(DType dtype, Shape shape) {
  *this = uninitialized(dtype, std::move(shape));
  std::memset(raw_data(), 0, nbytes());
}

bool Tensor::is_contiguous() const {
  return strides_ == contiguous_strides(shape_) || numel() <= 1;
}

std::string Tensor::describe() const {
  return fmt::format("{}{}", dtype_name(dtype_), shape_string(shape_));
}

std::span<const std::byte> Tensor::bytes() const {
  if (!is_contiguous()) throw_input_error("Tensor::bytes: {} is a strided view", describe());
  return {raw_data(), nbytes()};
}

Tensor Tensor::reshape(Shape new_shape) const {
  const auto inferred = std::count(new_shape.begin(), new_shape.end(), -1);
  if (inferred > 1)
    throw_input_error("reshape {} -> {}: more than one -1", describe(), shape_string(new_shape));
  if (inferred == 1) {
    std::int64_t known = 1;
    for (auto extent : new_shape) known *= extent == -1 ? 1 : extent;
    if (known == 0 || numel() % known != 0) {
      throw_input_error("reshape {} -> {}: cannot infer the -1 extent", describe(),
                        shape_string(new_shape));
    }
    *std::find(new_shape.begin(), new_shape.end(), -1) = numel() / known;
  }
  check_shape(new_shape, "reshape");
  if (shape_numel(new_shape) != numel()) {
    throw_input_error("reshape {} -> {}: {} elements cannot become {}", describe(),
                      shape_string(new_shape), numel(), shape_numel(new_shape));
  }
  if (!is_contiguous())
    throw_input_error("reshape {}: strided view; call contiguous() first", describe());
  Tensor out = *this;
  out.strides_ = contiguous_strides(new_shape);
  out.shape_ = std::move(new_shape);
  return out;
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(shape_.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (sorted != identity) {
    throw_input_error("permute {}: order [{}] is not a permutation of the {} axes", describe(),
                      fmt::join(order, ", "), rank());
  }
  Tensor out = *this;
  for (std::size_t i = 0; i < order.size(); ++i) {
    out.shape_[i] = shape_[std::size_t(order[i])];
    out.strides_[i] = strides_[std::size_t(order[i])];
  }
  return out;
}

Tensor Tensor::transpose(int axis_a, int axis_b) const {
  std::vector<int> order(shape_.size());
  std::iota(order.begin(), order.end(), 0);
  if (axis_a < 0) axis_a += rank();
  if (axis_b < 0) axis_b += rank();
  if (axis_a < 0 || axis_b < 0 || axis_a >= rank() || axis_b >= rank()) {
    throw_input_error("transpose {}: axes ({}, {}) out of range", describe(), axis_a, axis_b);
  }
  std::swap(order[std::size_t(axis_a)], order[std::size_t(axis_b)]);
  return permute(order);
}

Tensor Tensor::slice(int axis, std::int64_t start, std::int64_t stop) const {
  if (axis < 0) axis += rank();
  if (axis < 0 || axis >= rank())
    throw_input_error("slice {}: axis {} out of range", describe(), axis);
  const auto extent = shape_[std::size_t(axis)];
  if (start < 0 || stop < start || stop > extent) {
    throw_input_error("slice {}: range [{}, {}) outside axis {} of extent {}", describe(), start,
                      stop, axis, extent);
  }
  Tensor out = *this;
  out.offset_bytes_ += std::size_t(start * strides_[std::size_t(axis)]) * element_size();
  out.shape_[std::size_t(axis)] = stop - start;
  return out;
}

Tensor Tensor::expand(const Shape& shape) const {
  if (shape.size() < shape_.size()) {
    throw_input_error("expand {} to {}: target has fewer axes", describe(), shape_string(shape));
  }
  Tensor out = *this;
  const std::size_t lead = shape.size() - shape_.size();
  out.shape_ = shape;
  out.strides_.assign(shape.size(), 0);
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    const auto from = shape_[i], to = shape[lead + i];
    if (from != to && from != 1) {
      throw_input_error("expand {} to {}: axis {} of extent {} cannot become {}", describe(),
                        shape_string(shape), i, from, to);
    }
    out.strides_[lead + i] = from == to ? strides_[i] : 0;
  }
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = uninitialized(dtype_, shape_);
  const std::size_t size = element_size();
  if (is_contiguous()) {
    std::memcpy(out.raw_data(), raw_data(), nbytes());
    return out;
  }
  // Strided gather in row-major order of the view; the innermost axis is copied as a run.
  const std::int64_t n = numel();
  if (n == 0) return out;
  std::vector<std::int64_t> index(shape_.size(), 0);
  std::byte* dst = out.raw_data();
  const int last = rank() - 1;
  const std::int64_t inner = shape_[std::size_t(last)];
  const std::int64_t inner_stride = strides_[std::size_t(last)];
  for (std::int64_t done = 0; done < n; done += inner) {
    std::int64_t offset = 0;
    for (int axis = 0; axis < last; ++axis)
      offset += index[std::size_t(axis)] * strides_[std::size_t(axis)];
    const std::byte* src = raw_data() + offset * std::int64_t(size);
    if (inner_stride == 1) {
      std::memcpy(dst, src, std::size_t(inner) * size);
    } else {
      // Element-sized words, so that the run is a loop of plain loads and stores (a broadcast,
      // stride 0, is then a fill), not a memcpy call per element.
      auto copy_run = [&](auto word) {
        using Word = decltype(word);
        for (std::int64_t i = 0; i < inner; ++i) {
          std::memcpy(&word, src + i * inner_stride * std::int64_t(sizeof(Word)), sizeof(Word));
          std::memcpy(dst + i * std::int64_t(sizeof(Word)), &word, sizeof(Word));
        }
      };
      switch (size) {
        case 1:
          copy_run(std::uint8_t{});
          break;
        case 2:
          copy_run(std::uint16_t{});
          break;
        case 4:
          copy_run(std::uint32_t{});
          break;
        case 8:
          copy_run(std::uint64_t{});
          break;
        default:
          for (std::int64_t i = 0; i < inner; ++i)
            std::memcpy(dst + i * std::int64_t(size), src + i * inner_stride * std::int64_t(size),
                        size);
      }
    }
    dst += std::size_t(inner) * size;
    for (int axis = last - 1; axis >= 0; --axis) {
      if (++index[std::size_t(axis)] < shape_[std::size_t(axis)]) break;
      index[std::size_t(axis)] = 0;
    }
  }
  return out;
}

namespace {
template <class From, class To>
void convert_elements(const From* in, To* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (FloatingStorage<To>) {
      if constexpr (FloatingStorage<From>) {
        if constexpr (std::is_same_v<To, double>) {
          out[i] = to_double(in[i]);
        } else if constexpr (!std::is_same_v<From, double> && !std::is_same_v<To, double>) {
          out[i] = from_float<To>(to_float(in[i]));  // through fp32: exact widening, one rounding
        } else {
          out[i] = round_to<To>(to_double(in[i]));
        }
      } else {
        out[i] = round_to<To>(double(in[i]));
      }
    } else if constexpr (FloatingStorage<From>) {
      out[i] = To(to_double(in[i]));
    } else {
      out[i] = To(in[i]);
    }
  }
}

// visit_floating, widened to the integer and bool dtypes
template <class Fn>
decltype(auto) visit_any(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::i8:
      return fn(std::int8_t{});
    case DType::i16:
      return fn(std::int16_t{});
    case DType::i32:
      return fn(std::int32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::u8:
      return fn(std::uint8_t{});
    case DType::u16:
      return fn(std::uint16_t{});
    case DType::u32:
      return fn(std::uint32_t{});
    case DType::u64:
      return fn(std::uint64_t{});
    case DType::boolean:
      return fn(bool{});
    default:
      return visit_floating(dtype, "Tensor::to", std::forward<Fn>(fn));
  }
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  const Tensor source = contiguous();
  Tensor out = uninitialized(dtype, shape_);
  visit_any(dtype_, [&](auto from) {
    visit_any(dtype, [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      if constexpr ((FloatingStorage<From> || FloatingStorage<To>)&&(std::is_same_v<From, bool> ||
                                                                     std::is_same_v<To, bool>)) {
        throw_input_error("Tensor::to: no conversion between {} and {}", dtype_name(dtype_),
                          dtype_name(dtype));
      } else {
        convert_elements(reinterpret_cast<const From*>(source.raw_data()),
                         reinterpret_cast<To*>(out.raw_data()), numel());
      }
    });
  });
  return out;
}

namespace {
std::int64_t strided_offset(const Tensor& t, std::int64_t flat_index) {
  if (flat_index < 0 || flat_index >= t.numel()) {
    throw_input_error("element {} out of range for {}", flat_index, t.describe());
  }
  std::int64_t offset = 0;
  for (int axis = t.rank() - 1; axis >= 0; --axis) {
    const auto extent = t.shape()[std::size_t(axis)];
    offset += (flat_index % extent) * t.strides()[std::size_t(axis)];
    flat_index /= extent;
  }
  return offset;
}
}  // namespace

double Tensor::value_at(std::int64_t flat_index) const {
  const std::byte* element =
      raw_data() + strided_offset(*this, flat_index) * std::int64_t(element_size());
  return visit_any(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    T value;
    std::memcpy(&value, element, sizeof(T));
    if constexpr (FloatingStorage<T>) {
      return to_double(value);
    } else {
      return double(value);
    }
  });
}

std::uint64_t Tensor::bits_at(std::int64_t flat_index) const {
  const std::byte* element =
      raw_data() + strided_offset(*this, flat_index) * std::int64_t(element_size());
  std::uint64_t bits = 0;
  std::memcpy(&bits, element, element_size());  // little-endian: the low bytes
  return bits;
}

void check_same_shape(const Tensor& a, const Tensor& b, std::string_view what) {
  if (a.shape() != b.shape()) {
    throw_input_error("{}: shape mismatch, {} vs {}", what, a.describe(), b.describe());
  }
}

void check_same_dtype_and_shape(const Tensor& a, const Tensor& b, std::string_view what) {
  if (a.dtype() != b.dtype()) {
    throw_input_error("{}: dtype mismatch, {} vs {}", what, a.describe(), b.describe());
  }
  check_same_shape(a, b, what);
}

}  // namespace fusebench
