#include "fusebench/npy.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <regex>

namespace fusebench {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;
constexpr std::string_view kBf16Descr = "[('bf16', '<u2')]";

struct DescrEntry {
  std::string_view descr;  // without the byte-order character
  DType dtype;
};
constexpr DescrEntry kDescrs[] = {{"f2", DType::f16}, {"f4", DType::f32}, {"f8", DType::f64},
                                  {"i1", DType::i8},  {"i2", DType::i16}, {"i4", DType::i32},
                                  {"i8", DType::i64}, {"u1", DType::u8},  {"u2", DType::u16},
                                  {"u4", DType::u32}, {"u8", DType::u64}, {"b1", DType::boolean}};

std::string descr_for(DType dtype) {
  if (dtype == DType::bf16) return std::string(kBf16Descr);
  for (const auto& entry : kDescrs) {
    if (entry.dtype == dtype) return fmt::format("'{}{}'", dtype_size(dtype) == 1 ? '|' : '<', entry.descr);
  }
  throw_input_error("write_npy: dtype {} has no .npy descr", dtype_name(dtype));
}

struct Header {
  DType dtype;
  bool big_endian = false;
  bool fortran_order = false;
  Shape shape;
};

Header parse_header(std::string_view text, const std::string& source) {
  auto fail = [&](std::string_view why) -> Header {
    throw_input_error("{}: malformed .npy header ({}): {}", source, why, text);
  };
  Header header;
  std::cmatch match;
  const std::string owned(text);
  // descr: a simple type string, or our one-field bf16 record.
  static const std::regex kDescrString(R"('descr'\s*:\s*'([<>|=])([a-zA-Z])(\d+)')");
  static const std::regex kDescrRecord(R"('descr'\s*:\s*(\[.*?\]))");
  if (std::regex_search(owned.c_str(), match, kDescrString)) {
    const std::string kind = match[2].str() + match[3].str();
    header.big_endian = match[1].str() == ">";
    bool known = false;
    for (const auto& entry : kDescrs) {
      if (entry.descr == kind) {
        header.dtype = entry.dtype;
        known = true;
      }
    }
    if (!known) {
      throw_input_error("{}: unsupported .npy dtype '{}{}' (supported: f2, f4, f8, i1-i8, u1-u8, b1, "
                        "and bf16 as {})",
                        source, match[1].str(), kind, kBf16Descr);
    }
  } else if (std::regex_search(owned.c_str(), match, kDescrRecord)) {
    std::string record = match[1].str();
    std::replace(record.begin(), record.end(), '"', '\'');
    if (record != kBf16Descr) {
      throw_input_error("{}: unsupported structured .npy dtype {} (the only record dtype read is bf16, "
                        "{})",
                        source, record, kBf16Descr);
    }
    header.dtype = DType::bf16;
  } else {
    return fail("no 'descr'");
  }
  static const std::regex kFortran(R"('fortran_order'\s*:\s*(True|False))");
  if (!std::regex_search(owned.c_str(), match, kFortran)) return fail("no 'fortran_order'");
  header.fortran_order = match[1].str() == "True";
  static const std::regex kShape(R"('shape'\s*:\s*\(([^)]*)\))");
  if (!std::regex_search(owned.c_str(), match, kShape)) return fail("no 'shape'");
  const std::string dims = match[1].str();
  static const std::regex kDim(R"(\s*(\d+)\s*(,|$))");
  std::size_t consumed = 0;
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), kDim); it != std::sregex_iterator(); ++it) {
    if (std::size_t(it->position()) != consumed) return fail("bad shape");
    header.shape.push_back(std::stoll((*it)[1].str()));
    consumed = std::size_t(it->position() + it->length());
  }
  if (dims.find_first_not_of(" \t") != std::string::npos && consumed != dims.size()) return fail("bad shape");
  return header;
}

void byte_swap(std::byte* data, std::size_t count, std::size_t size) {
  for (std::size_t i = 0; i < count; ++i) std::reverse(data + i * size, data + (i + 1) * size);
}
}  // namespace

Tensor parse_npy(std::span<const std::byte> file, const std::string& source) {
  if (file.size() < kMagicSize + 4 || std::memcmp(file.data(), kMagic, kMagicSize) != 0) {
    throw_input_error("{}: not a .npy file (missing the \\x93NUMPY magic)", source);
  }
  const auto major = std::to_integer<int>(file[6]);
  std::size_t header_length = 0, header_start = 0;
  if (major == 1) {
    header_length = std::to_integer<std::size_t>(file[8]) | (std::to_integer<std::size_t>(file[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) throw_input_error("{}: truncated .npy header", source);
    for (int b = 0; b < 4; ++b) header_length |= std::to_integer<std::size_t>(file[8 + std::size_t(b)]) << (8 * b);
    header_start = 12;
  } else {
    throw_input_error("{}: unsupported .npy format version {}", source, major);
  }
  if (file.size() < header_start + header_length) {
    throw_input_error("{}: truncated .npy header ({} bytes declared, {} present)", source, header_length,
                      file.size() - header_start);
  }
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + header_start, header_length);
  const Header header = parse_header(text, source);
  Shape shape = header.shape;
  if (header.fortran_order) std::reverse(shape.begin(), shape.end());
  Tensor out = Tensor::uninitialized(header.dtype, shape);
  const std::size_t payload = file.size() - header_start - header_length;
  if (payload < out.nbytes()) {
    throw_input_error("{}: truncated .npy data: shape {} of {} needs {} bytes, file has {}", source,
                      shape_string(header.shape), dtype_name(header.dtype), out.nbytes(), payload);
  }
  if (payload > out.nbytes()) {
    throw_input_error("{}: {} trailing bytes after the .npy data of shape {} {}", source, payload - out.nbytes(),
                      shape_string(header.shape), dtype_name(header.dtype));
  }
  std::memcpy(out.raw_data(), file.data() + header_start + header_length, out.nbytes());
  if (header.big_endian && out.element_size() > 1) {
    byte_swap(out.raw_data(), std::size_t(out.numel()), out.element_size());
  }
  if (header.fortran_order && out.rank() > 1) {
    std::vector<int> reverse_axes(std::size_t(out.rank()));
    for (int i = 0; i < out.rank(); ++i) reverse_axes[std::size_t(i)] = out.rank() - 1 - i;
    out = out.permute(reverse_axes).contiguous();
  }
  return out;
}

Tensor read_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input_error("{}: cannot open for reading: {}", path.string(), std::strerror(errno));
  std::vector<std::byte> bytes;
  in.seekg(0, std::ios::end);
  bytes.resize(std::size_t(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!in) throw_input_error("{}: read error", path.string());
  return parse_npy(bytes, path.string());
}

std::vector<std::byte> serialize_npy(const Tensor& tensor_in) {
  const Tensor tensor = tensor_in.contiguous();
  std::string shape_text;
  if (tensor.rank() == 1) {
    shape_text = fmt::format("({},)", tensor.shape()[0]);
  } else {
    shape_text = fmt::format("({})", fmt::join(tensor.shape(), ", "));
  }
  std::string header =
      fmt::format("{{'descr': {}, 'fortran_order': False, 'shape': {}, }}", descr_for(tensor.dtype()), shape_text);
  // Pad with spaces and a newline so that the data starts on a 64-byte boundary (version 1.0
  // unless the header needs the 32-bit length of 2.0).
  const bool version2 = header.size() + 11 > 65535;
  const std::size_t prefix = version2 ? 12 : 10;
  const std::size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');
  std::vector<std::byte> out(total + tensor.nbytes());
  std::memcpy(out.data(), kMagic, kMagicSize);
  out[6] = std::byte(version2 ? 2 : 1);
  out[7] = std::byte(0);
  const std::size_t length = header.size();
  for (std::size_t b = 0; b < (version2 ? 4u : 2u); ++b) out[8 + b] = std::byte((length >> (8 * b)) & 0xff);
  std::memcpy(out.data() + prefix, header.data(), header.size());
  std::memcpy(out.data() + total, tensor.raw_data(), tensor.nbytes());
  return out;
}

void write_npy(const std::filesystem::path& path, const Tensor& tensor) {
  write_file_atomically(path, serialize_npy(tensor));
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  const auto temporary = std::filesystem::path(path).concat(fmt::format(".tmp.{}", ::getpid()));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw_input_error("{}: cannot open for writing: {}", temporary.string(), std::strerror(errno));
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw_input_error("{}: write failed", path.string());
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    throw_input_error("{}: cannot rename the temporary file into place: {}", path.string(), error.message());
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace fusebench
