// fusebench._core: the precision toolkit (fusebench::toolkit) for Python. The Python package
// (fusebench/__init__.py) is the public API; this module only moves arrays in and results out:
//   - operands arrive as nanobind ndarrays (DLPack or the buffer protocol) and are borrowed as
//     fusebench::Tensor views without a copy (Tensor::borrow keeps the Python object alive);
//   - results are the toolkit's own JSON forms (fusebench/json.hpp), so every field has the name
//     and meaning it has in fusebench-diff and the suites' dumps;
//   - result tensors (ulp_diff's distances, ulp_error) go back to numpy without a copy.
// The GIL is released while the toolkit computes.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusebench/compare.hpp"
#include "fusebench/diff.hpp"
#include "fusebench/error.hpp"
#include "fusebench/error_stats.hpp"
#include "fusebench/json.hpp"
#include "fusebench/tensor.hpp"

namespace nb = nanobind;
using fusebench::DType;
using fusebench::Tensor;

namespace {

using Borrowed = nb::ndarray<nb::ro, nb::device::cpu>;

// ---- operands
std::optional<DType> dtype_from_dlpack(nb::dlpack::dtype dtype) {
  if (dtype.lanes != 1) return std::nullopt;
  const auto code = static_cast<nb::dlpack::dtype_code>(dtype.code);
  switch (code) {
    case nb::dlpack::dtype_code::Float:
      if (dtype.bits == 16) return DType::f16;
      if (dtype.bits == 32) return DType::f32;
      if (dtype.bits == 64) return DType::f64;
      return std::nullopt;
    case nb::dlpack::dtype_code::Bfloat:
      if (dtype.bits == 16) return DType::bf16;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::string dlpack_dtype_string(nb::dlpack::dtype dtype) {
  static const char* names[] = {"int", "uint", "float", "?", "bfloat", "complex", "bool"};
  const char* name = dtype.code < 7 ? names[dtype.code] : "float8/6/4";
  return std::string(name) + std::to_string(int(dtype.bits)) +
         (dtype.lanes != 1 ? "x" + std::to_string(dtype.lanes) : "");
}

// `name` is the Python argument's name, for the messages. bf16_bits: the operand holds bfloat16
// values as raw uint16 (numpy has no bfloat16 dtype of its own; ml_dtypes arrays arrive viewed as
// uint16).
Tensor borrow_operand(nb::handle object, const std::string& name, bool bf16_bits) {
  Borrowed array;
  if (!nb::try_cast(object, array, /*convert=*/false)) {
    throw nb::type_error(
        (name +
         ": expected a CPU array (numpy, or an object exposing DLPack or the array "
         "interface), got " +
         nb::type_name(object.type()).c_str())
            .c_str());
  }
  std::optional<DType> dtype;
  if (bf16_bits) {
    if (array.dtype() == nb::dtype<std::uint16_t>()) dtype = DType::bf16;
  } else {
    dtype = dtype_from_dlpack(array.dtype());
  }
  if (!dtype) {
    throw nb::type_error(
        (name + ": dtype " + dlpack_dtype_string(array.dtype()) +
         " is not a floating type fusebench compares (float16, bfloat16, float32, float64)")
            .c_str());
  }
  fusebench::Shape shape(array.ndim()), strides(array.ndim());
  for (std::size_t i = 0; i < array.ndim(); ++i) {
    shape[i] = std::int64_t(array.shape(i));
    strides[i] = array.stride(i);
    if (strides[i] < 0 && shape[i] > 1) {
      throw nb::value_error(
          (name + ": negative strides cannot be viewed without a copy; pass a contiguous "
                  "array (numpy.ascontiguousarray)")
              .c_str());
    }
    if (shape[i] <= 1) strides[i] = 0;
  }
  // The ndarray holds a reference to the Python object (or the DLPack capsule); the tensor's
  // storage shares ownership of it. Released with the GIL held: every Tensor made here dies
  // before the binding returns, or inside a result whose owner is a Python capsule.
  auto owner = std::make_shared<Borrowed>(array);
  return Tensor::borrow(*dtype, std::move(shape), std::move(strides), array.data(),
                        std::move(owner));
}

// A toolkit tensor handed to numpy without a copy: the capsule owns a Tensor (sharing the buffer).
nb::object to_numpy(const Tensor& tensor) {
  auto* kept = new Tensor(tensor.contiguous());
  nb::capsule owner(kept, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<std::size_t> shape(kept->shape().begin(), kept->shape().end());
  nb::dlpack::dtype dtype;
  switch (kept->dtype()) {
    case DType::u16:
      dtype = nb::dtype<std::uint16_t>();
      break;
    case DType::u32:
      dtype = nb::dtype<std::uint32_t>();
      break;
    case DType::u64:
      dtype = nb::dtype<std::uint64_t>();
      break;
    case DType::f64:
      dtype = nb::dtype<double>();
      break;
    case DType::f32:
      dtype = nb::dtype<float>();
      break;
    default:
      throw std::logic_error("to_numpy: unexpected result dtype");
  }
  nb::ndarray<nb::numpy> array(kept->raw_data(), shape.size(), shape.data(), owner, nullptr, dtype);
  return array.cast();
}

// JSON text of a toolkit result; the Python side parses it (results are small: no per-element data).
std::string dump(const nlohmann::json& json) { return json.dump(); }

fusebench::NanPolicy nan_policy(bool nan_equal) {
  return nan_equal ? fusebench::NanPolicy::AnyNanEqual : fusebench::NanPolicy::Bitwise;
}
fusebench::ZeroPolicy zero_policy(bool zeros_equal) {
  return zeros_equal ? fusebench::ZeroPolicy::SignedZerosEqual : fusebench::ZeroPolicy::Bitwise;
}

// ---- bindings
std::string bit_equal(nb::handle a, nb::handle b, bool a_bf16, bool b_bf16, bool nan_equal,
                      bool zeros_equal, std::size_t max_indices) {
  const Tensor ta = borrow_operand(a, "a", a_bf16), tb = borrow_operand(b, "b", b_bf16);
  fusebench::BitEqualResult result;
  {
    nb::gil_scoped_release release;
    result = fusebench::bit_equal(ta, tb,
                                  {nan_policy(nan_equal), zero_policy(zeros_equal), max_indices});
  }
  return dump(fusebench::to_json(result));
}

nb::tuple ulp_diff(nb::handle a, nb::handle b, bool a_bf16, bool b_bf16, int bins,
                   std::size_t max_indices) {
  const Tensor ta = borrow_operand(a, "a", a_bf16), tb = borrow_operand(b, "b", b_bf16);
  fusebench::UlpDiffResult result;
  fusebench::UlpDiffSummary summary;
  {
    nb::gil_scoped_release release;
    result = fusebench::ulp_diff(ta, tb, {bins, max_indices});
    summary = fusebench::summarize(result);
  }
  nlohmann::json json = fusebench::to_json(summary);
  json["nan_pairs"] = result.nan_pairs;
  json["first_nan_indices"] = result.first_nan_indices;
  json["hist"] = fusebench::to_json(result.histogram);
  return nb::make_tuple(to_numpy(result.distance), dump(json));
}

nb::object ulp_error(nb::handle y, nb::handle ref, bool y_bf16, bool ref_bf16) {
  const Tensor ty = borrow_operand(y, "y", y_bf16), tref = borrow_operand(ref, "ref", ref_bf16);
  Tensor error;
  {
    nb::gil_scoped_release release;
    error = fusebench::ulp_error(ty, tref);
  }
  return to_numpy(error);
}

std::string error_stats(nb::handle y, nb::handle ref, bool y_bf16, bool ref_bf16, int bins,
                        std::size_t max_indices) {
  const Tensor ty = borrow_operand(y, "y", y_bf16), tref = borrow_operand(ref, "ref", ref_bf16);
  fusebench::ErrorStats stats;
  {
    nb::gil_scoped_release release;
    stats = fusebench::error_stats(ty, tref, {bins, max_indices});
  }
  return dump(fusebench::to_json(stats));
}

std::string diff(nb::handle a, nb::handle b, nb::handle ref, bool a_bf16, bool b_bf16,
                 bool ref_bf16, int bins, bool nan_equal, bool zeros_equal, std::string a_name,
                 std::string b_name, std::string ref_name) {
  const Tensor ta = borrow_operand(a, a_name, a_bf16), tb = borrow_operand(b, b_name, b_bf16);
  std::optional<Tensor> tref;
  if (!ref.is_none()) tref = borrow_operand(ref, ref_name, ref_bf16);
  fusebench::DiffOptions options;
  options.histogram_bins = bins;
  options.nan = nan_policy(nan_equal);
  options.zero = zero_policy(zeros_equal);
  options.a_name = std::move(a_name);
  options.b_name = std::move(b_name);
  options.ref_name = std::move(ref_name);
  nlohmann::json json;
  {
    nb::gil_scoped_release release;
    json = fusebench::diff_json(ta, tb, tref ? &*tref : nullptr, options);
  }
  return dump(json);
}

// ---- in-process C++ timing, for the benchmark (bench/bench_python.py): the same toolkit call
// on the same borrowed memory, timed in C++ without Python in the loop. Returns seconds per call.
std::vector<double> time_cpp(const std::string& op, nb::handle a, nb::handle b, bool a_bf16,
                             bool b_bf16, int repeats) {
  const Tensor ta = borrow_operand(a, "a", a_bf16), tb = borrow_operand(b, "b", b_bf16);
  std::vector<double> seconds;
  nb::gil_scoped_release release;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    if (op == "ulp_diff") {
      auto result = fusebench::ulp_diff(ta, tb);
      auto summary = fusebench::summarize(result);
      if (summary.compared > std::uint64_t(ta.numel()))
        throw std::logic_error("time_cpp: impossible count");
    } else if (op == "error_stats") {
      auto stats = fusebench::error_stats(ta, tb);
      if (stats.count != ta.numel()) throw std::logic_error("time_cpp: impossible count");
    } else {
      throw fusebench::InputError("time_cpp: unknown op '" + op + "' (ulp_diff, error_stats)");
    }
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return seconds;
}

// The address the toolkit reads an operand at: the tests compare it with the caller's own data
// pointer to show that operands are borrowed, not copied.
std::uintptr_t borrowed_address(nb::handle x, bool bf16_bits) {
  const Tensor t = borrow_operand(x, "x", bf16_bits);
  return reinterpret_cast<std::uintptr_t>(t.raw_data());
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "fusebench precision toolkit (C++), bound with nanobind; use the fusebench package";
  // The toolkit's InputError (bad dtype, shape mismatch, bad option) is a ValueError in Python;
  // its message already names the operation, the shapes and the dtypes.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const fusebench::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("bit_equal", &bit_equal);
  m.def("ulp_diff", &ulp_diff);
  m.def("ulp_error", &ulp_error);
  m.def("error_stats", &error_stats);
  m.def("diff", &diff, nb::arg("a"), nb::arg("b"), nb::arg("ref").none(), nb::arg("a_bf16"),
        nb::arg("b_bf16"), nb::arg("ref_bf16"), nb::arg("bins"), nb::arg("nan_equal"),
        nb::arg("zeros_equal"), nb::arg("a_name"), nb::arg("b_name"), nb::arg("ref_name"));
  m.def("time_cpp", &time_cpp);
  m.def("borrowed_address", &borrowed_address);
}
