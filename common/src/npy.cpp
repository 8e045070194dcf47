#include "fusebench/npy.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

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
    if (entry.dtype == dtype)
      return fmt::format("'{}{}'", dtype_size(dtype) == 1 ? '|' : '<', entry.descr);
  }
  throw_input_error("write_npy: dtype {} has no .npy descr", dtype_name(dtype));
}

struct Header {
  DType dtype;
  bool big_endian = false;
  bool fortran_order = false;
  Shape shape;
};

// ---- the header: a Python dict literal, parsed by hand (std::regex recurses per character and
// overflows the stack on a long header, which a fuzzer finds at once). The subset numpy writes:
// dicts, lists, tuples, quoted strings, non-negative integers, True and False, nested at most
// kMaxDepth deep.
struct Literal {
  enum class Kind { String, Integer, Boolean, Sequence, Dict } kind = Kind::String;
  std::string text;               // String
  std::int64_t integer = 0;       // Integer
  bool boolean = false;           // Boolean
  bool is_list = false;           // Sequence: list or tuple
  std::vector<Literal> items;     // Sequence, or a Dict's values
  std::vector<std::string> keys;  // Dict: keys[i] names items[i]

  static Literal of(Kind kind) {
    Literal out;
    out.kind = kind;
    return out;
  }
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  Literal parse_document() {
    Literal value = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the dict");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 8;

  [[noreturn]] void fail(std::string_view why) const {
    throw_input_error("{}: malformed .npy header ({} at byte {}): {}", source_, why, pos_,
                      text_.substr(0, std::min<std::size_t>(text_.size(), 200)));
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool take(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Literal parse_value(int depth) {
    if (depth > kMaxDepth) fail("nested too deeply");
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return parse_dict(depth);
    if (c == '[' || c == '(') return parse_sequence(depth);
    if (c == '\'' || c == '"') {
      Literal out = Literal::of(Literal::Kind::String);
      out.text = parse_string();
      return out;
    }
    if (c >= '0' && c <= '9') return parse_integer();
    for (auto [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        Literal out = Literal::of(Literal::Kind::Boolean);
        out.boolean = value;
        return out;
      }
    }
    fail(fmt::format("unexpected character '{}'", c));
  }
  std::string parse_string() {
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  Literal parse_integer() {
    std::int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_++] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10)
        fail("integer out of range");
      value = value * 10 + digit;
    }
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2's long suffix
    Literal out = Literal::of(Literal::Kind::Integer);
    out.integer = value;
    return out;
  }
  Literal parse_sequence(int depth) {
    const char open = text_[pos_++];
    const char close = open == '[' ? ']' : ')';
    Literal out = Literal::of(Literal::Kind::Sequence);
    out.is_list = open == '[';
    while (true) {
      if (take(close)) return out;
      out.items.push_back(parse_value(depth + 1));
      if (take(close)) return out;
      if (!take(',')) fail("expected ',' in a sequence");
    }
  }
  Literal parse_dict(int depth) {
    ++pos_;
    Literal out = Literal::of(Literal::Kind::Dict);
    while (true) {
      if (take('}')) return out;
      skip_space();
      if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
        fail("expected a quoted key");
      std::string key = parse_string();
      if (!take(':')) fail("expected ':' after a key");
      out.keys.push_back(std::move(key));
      out.items.push_back(parse_value(depth + 1));
      if (take('}')) return out;
      if (!take(',')) fail("expected ',' in the dict");
    }
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

Header parse_header(std::string_view text, const std::string& source) {
  auto fail = [&](std::string_view why) -> Header {
    throw_input_error("{}: malformed .npy header ({}): {}", source, why,
                      text.substr(0, std::min<std::size_t>(text.size(), 200)));
  };
  const Literal document = HeaderParser(text, source).parse_document();
  if (document.kind != Literal::Kind::Dict) return fail("not a dict");
  auto find = [&](std::string_view key) -> const Literal* {
    for (std::size_t i = 0; i < document.keys.size(); ++i) {
      if (document.keys[i] == key) return &document.items[i];
    }
    return nullptr;
  };
  Header header;
  const Literal* descr = find("descr");
  if (descr == nullptr) return fail("no 'descr'");
  if (descr->kind == Literal::Kind::String) {
    const std::string& d = descr->text;
    if (d.size() < 2 || (d[0] != '<' && d[0] != '>' && d[0] != '|' && d[0] != '=')) {
      throw_input_error(
          "{}: unsupported .npy dtype '{}' (supported: f2, f4, f8, i1-i8, u1-u8, b1, and bf16 as "
          "{})",
          source, d, kBf16Descr);
    }
    header.big_endian = d[0] == '>';
    const std::string_view kind = std::string_view(d).substr(1);
    bool known = false;
    for (const auto& entry : kDescrs) {
      if (entry.descr == kind) {
        header.dtype = entry.dtype;
        known = true;
      }
    }
    if (!known) {
      throw_input_error(
          "{}: unsupported .npy dtype '{}' (supported: f2, f4, f8, i1-i8, u1-u8, b1, and bf16 as "
          "{})",
          source, d, kBf16Descr);
    }
  } else {
    // The one record dtype read: [('bf16', '<u2')].
    const bool is_bf16 =
        descr->kind == Literal::Kind::Sequence && descr->is_list && descr->items.size() == 1 &&
        descr->items[0].kind == Literal::Kind::Sequence && descr->items[0].items.size() == 2 &&
        descr->items[0].items[0].kind == Literal::Kind::String &&
        descr->items[0].items[0].text == "bf16" &&
        descr->items[0].items[1].kind == Literal::Kind::String &&
        descr->items[0].items[1].text == "<u2";
    if (!is_bf16) {
      throw_input_error(
          "{}: unsupported structured .npy dtype (the only record dtype read is bf16, {})", source,
          kBf16Descr);
    }
    header.dtype = DType::bf16;
  }
  const Literal* fortran = find("fortran_order");
  if (fortran == nullptr || fortran->kind != Literal::Kind::Boolean)
    return fail("no boolean 'fortran_order'");
  header.fortran_order = fortran->boolean;
  const Literal* shape = find("shape");
  if (shape == nullptr || shape->kind != Literal::Kind::Sequence || shape->is_list)
    return fail("no 'shape' tuple");
  for (const auto& dim : shape->items) {
    if (dim.kind != Literal::Kind::Integer) return fail("a shape entry is not an integer");
    header.shape.push_back(dim.integer);
  }
  return header;
}

// The data size a header promises, or nullopt when it does not fit in 64 bits.
std::optional<std::uint64_t> promised_bytes(const Shape& shape, DType dtype) {
  std::uint64_t bytes = dtype_size(dtype);
  for (const auto dim : shape) {
    if (dim != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / std::uint64_t(dim))
      return std::nullopt;
    bytes *= std::uint64_t(dim);
  }
  return bytes;
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
    header_length =
        std::to_integer<std::size_t>(file[8]) | (std::to_integer<std::size_t>(file[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) throw_input_error("{}: truncated .npy header", source);
    for (int b = 0; b < 4; ++b)
      header_length |= std::to_integer<std::size_t>(file[8 + std::size_t(b)]) << (8 * b);
    header_start = 12;
  } else {
    throw_input_error("{}: unsupported .npy format version {}", source, major);
  }
  if (file.size() < header_start + header_length) {
    throw_input_error("{}: truncated .npy header ({} bytes declared, {} present)", source,
                      header_length, file.size() - header_start);
  }
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + header_start,
                              header_length);
  const Header header = parse_header(text, source);
  Shape shape = header.shape;
  if (header.fortran_order) std::reverse(shape.begin(), shape.end());
  // Check what the header promises against the file before allocating anything.
  const std::size_t payload = file.size() - header_start - header_length;
  const auto needed = promised_bytes(header.shape, header.dtype);
  if (!needed) {
    throw_input_error(
        "{}: the .npy header's shape {} of {} does not fit in 64 bits of bytes; the file has {} "
        "data bytes",
        source, shape_string(header.shape), dtype_name(header.dtype), payload);
  }
  if (payload < *needed) {
    throw_input_error("{}: truncated .npy data: shape {} of {} needs {} bytes, file has {}", source,
                      shape_string(header.shape), dtype_name(header.dtype), *needed, payload);
  }
  if (payload > *needed) {
    throw_input_error("{}: {} trailing bytes after the .npy data of shape {} {}", source,
                      payload - *needed, shape_string(header.shape), dtype_name(header.dtype));
  }
  Tensor out = Tensor::uninitialized(header.dtype, shape);
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
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status))
    throw_input_error("{}: no such file", path.string());
  if (std::filesystem::is_directory(status))
    throw_input_error("{}: is a directory, not a .npy file", path.string());
  if (!std::filesystem::is_regular_file(status))
    throw_input_error("{}: not a regular file", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw_input_error("{}: cannot open for reading: {}", path.string(), std::strerror(errno));
  std::vector<std::byte> bytes;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (!in || size < 0) throw_input_error("{}: cannot determine the file size", path.string());
  bytes.resize(std::size_t(size));
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
  std::string header = fmt::format("{{'descr': {}, 'fortran_order': False, 'shape': {}, }}",
                                   descr_for(tensor.dtype()), shape_text);
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
  for (std::size_t b = 0; b < (version2 ? 4u : 2u); ++b)
    out[8 + b] = std::byte((length >> (8 * b)) & 0xff);
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
    if (!out)
      throw_input_error("{}: cannot open for writing: {}", temporary.string(),
                        std::strerror(errno));
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
    throw_input_error("{}: cannot rename the temporary file into place: {}", path.string(),
                      error.message());
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace fusebench
