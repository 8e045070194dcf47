// Element types of tensors, their names and sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fusebench/float_formats.hpp"

namespace fusebench {

enum class DType : std::uint8_t {
  f16,
  bf16,
  f32,
  f64,
  i8,
  i16,
  i32,
  i64,
  u8,
  u16,
  u32,
  u64,
  boolean,
};

std::size_t dtype_size(DType dtype);
// Short names used in benchmark names, file manifests and error messages: f16, bf16, f32, ...
std::string_view dtype_name(DType dtype);
// Accepts the short names and the common long ones (fp16, float16, bfloat16, float32, ...).
// Throws InputError naming the unknown string.
DType parse_dtype(std::string_view name);
constexpr bool is_floating(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f32 || dtype == DType::f64;
}

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<std::int8_t> {
  static constexpr DType value = DType::i8;
};
template <>
struct DTypeOf<std::int16_t> {
  static constexpr DType value = DType::i16;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<std::uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct DTypeOf<std::uint16_t> {
  static constexpr DType value = DType::u16;
};
template <>
struct DTypeOf<std::uint32_t> {
  static constexpr DType value = DType::u32;
};
template <>
struct DTypeOf<std::uint64_t> {
  static constexpr DType value = DType::u64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::boolean;
};
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls fn(T{}) with the storage type of a floating dtype; InputError for the others.
template <class Fn>
decltype(auto) visit_floating(DType dtype, std::string_view what, Fn&& fn);

}  // namespace fusebench

#include "fusebench/error.hpp"

template <class Fn>
decltype(auto) fusebench::visit_floating(DType dtype, std::string_view what, Fn&& fn) {
  switch (dtype) {
    case DType::f16:
      return fn(Half{});
    case DType::bf16:
      return fn(BFloat16{});
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    default:
      throw_input_error("{}: dtype {} is not a floating type (expected f16, bf16, f32 or f64)",
                        what, dtype_name(dtype));
  }
}
