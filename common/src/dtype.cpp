#include "fusebench/dtype.hpp"

#include <array>
#include <string>

namespace fusebench {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::f16, "f16", 2},
    {DType::bf16, "bf16", 2},
    {DType::f32, "f32", 4},
    {DType::f64, "f64", 8},
    {DType::i8, "i8", 1},
    {DType::i16, "i16", 2},
    {DType::i32, "i32", 4},
    {DType::i64, "i64", 8},
    {DType::u8, "u8", 1},
    {DType::u16, "u16", 2},
    {DType::u32, "u32", 4},
    {DType::u64, "u64", 8},
    {DType::boolean, "bool", 1},
}};
}  // namespace

std::size_t dtype_size(DType dtype) { return kDTypes[std::size_t(dtype)].size; }
std::string_view dtype_name(DType dtype) { return kDTypes[std::size_t(dtype)].name; }

DType parse_dtype(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  struct Alias {
    std::string_view alias;
    DType dtype;
  };
  constexpr Alias kAliases[] = {{"fp16", DType::f16},    {"float16", DType::f16},
                                {"half", DType::f16},    {"bfloat16", DType::bf16},
                                {"fp32", DType::f32},    {"float32", DType::f32},
                                {"float", DType::f32},   {"fp64", DType::f64},
                                {"float64", DType::f64}, {"double", DType::f64}};
  for (const auto& alias : kAliases) {
    if (alias.alias == name) return alias.dtype;
  }
  throw_input_error(
      "unknown dtype '{}' (expected one of f16, bf16, f32, f64, i8, i16, i32, i64, "
      "u8, u16, u32, u64, bool)",
      name);
}

}  // namespace fusebench
