// The safetensors reader/writer. Everything in a header is checked before a byte of tensor data
// is copied; nlohmann::json exceptions never leave this file.

#include "io/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "io/op_io_support.hpp"

namespace kda::io {

namespace {

using nlohmann::json;

// Tensor bytes are copied as they lie in the file, which is little-endian by definition.
static_assert(std::endian::native == std::endian::little,
              "this reader assumes a little-endian host");

constexpr size_t kLengthBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";
// A valid header nests three deep (top object -> entry -> shape list). Refusing deeper input
// (more than this many objects and lists inside each other) keeps a hostile "[[[[..." header
// from building a huge document or recursing deeply.
constexpr int kMaxJsonDepth = 8;
// Values in the header's objects and lists: 16 per entry allowed, where a tensor's entry has at
// most 3 + 6 + 2 (its fields, a rank-6 shape, two offsets). Bounds the document built from a
// header of up to 100 MB (a list of 50 million zeros would take 800 MB) to a few tens of MB.
constexpr int64_t kMaxHeaderValues = 16 * kMaxSafetensorsEntries;

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f16, "F16"}, {DType::bf16, "BF16"},
                                     {DType::f32, "F32"}, {DType::f64, "F64"},
                                     {DType::i32, "I32"}, {DType::i64, "I64"}};

bool dtype_from_name(std::string_view name, DType* out) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.name == name) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

std::string_view name_of(DType dtype) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  return {};
}

// A string from the file, quoted and escaped so an error message stays one printable line.
std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      q += '\\';
      q += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      q += buf;
    } else {
      q += static_cast<char>(c);  // UTF-8 continuation bytes pass through
    }
  }
  return q + "\"";
}

// nlohmann's messages may quote raw input bytes; keep only printable ASCII.
std::string printable(std::string_view s) {
  std::string p(s);
  for (char& c : p) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) c = '?';
  }
  return p;
}

// A JSON integer >= 0 that fits int64 (shapes and offsets are int64 once read).
bool read_size(const json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;  // negatives parse as number_integer, 2.0 as float
  const uint64_t v = j.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = v;
  return true;
}

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the start of the data section
};

Status parse_entry(const std::string& name, const json& j, uint64_t data_size, Entry* e) {
  const std::string what = "tensor " + quoted(name) + ": ";
  if (!j.is_object()) {
    return file_error(what + "expected an object {dtype, shape, data_offsets}, got " +
                      j.type_name());
  }
  e->name = name;

  const auto dtype_it = j.find("dtype");
  if (dtype_it == j.end()) return file_error(what + "missing \"dtype\"");
  if (!dtype_it->is_string()) {
    return file_error(what + "\"dtype\" must be a string, got " + dtype_it->type_name());
  }
  const auto& dtype_text = dtype_it->get_ref<const std::string&>();
  if (!dtype_from_name(dtype_text, &e->dtype)) {
    return file_error(what + "unsupported dtype " + quoted(dtype_text) +
                      " (supported: F16 BF16 F32 F64 I32 I64)");
  }
  const uint64_t itemsize = dtype_size(e->dtype);

  const auto shape_it = j.find("shape");
  if (shape_it == j.end()) return file_error(what + "missing \"shape\"");
  if (!shape_it->is_array()) {
    return file_error(what + "\"shape\" must be a list of non-negative integers, got " +
                      shape_it->type_name());
  }
  if (shape_it->size() > static_cast<size_t>(kMaxRank)) {
    return file_error(what + "rank " + std::to_string(shape_it->size()) + " is above the " +
                      std::to_string(kMaxRank) + " this reader supports");
  }
  for (const json& dim : *shape_it) {
    uint64_t extent = 0;
    if (!read_size(dim, &extent)) {
      return file_error(what + "\"shape\" must be a list of non-negative integers, got " +
                        printable(shape_it->dump()));
    }
    e->shape.push_back(static_cast<int64_t>(extent));
  }
  // The byte count of the nonzero extents, with an overflow check, must fit int64 also when a
  // zero extent makes the tensor empty: its row-major strides are those products, and a shape
  // like [2^40, 2^40, 0] would overflow them (and the element count taken left to right).
  uint64_t nbytes = itemsize;
  bool has_zero = false;
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (int64_t extent : e->shape) {
    const auto ext = static_cast<uint64_t>(extent);
    if (ext == 0) {
      has_zero = true;
      continue;
    }
    if (nbytes > limit / ext) {
      return file_error(what + "element count of shape " + shape_text(e->shape) + " overflows");
    }
    nbytes *= ext;
  }
  if (has_zero) nbytes = 0;

  const auto offsets_it = j.find("data_offsets");
  if (offsets_it == j.end()) return file_error(what + "missing \"data_offsets\"");
  if (!offsets_it->is_array() || offsets_it->size() != 2 ||
      !read_size((*offsets_it)[0], &e->begin) || !read_size((*offsets_it)[1], &e->end)) {
    return file_error(what +
                      "\"data_offsets\" must be two non-negative integers [begin, end], got " +
                      printable(offsets_it->dump()));
  }
  const std::string range = "[" + std::to_string(e->begin) + ", " + std::to_string(e->end) + "]";
  if (e->begin > e->end) return file_error(what + "data_offsets " + range + " has begin > end");
  if (e->end > data_size) {
    return file_error(what + "data_offsets " + range + " runs past the end of the data section (" +
                      std::to_string(data_size) + " bytes)");
  }
  if (e->end - e->begin != nbytes) {
    return file_error(what + "data_offsets " + range + " span " +
                      std::to_string(e->end - e->begin) + " bytes, but shape " +
                      shape_text(e->shape) + " of " + dtype_text + " needs " +
                      std::to_string(nbytes));
  }
  return Status::Ok();
}

Status parse_metadata(const json& j, std::map<std::string, std::string>* out) {
  if (!j.is_object()) {
    return file_error("\"__metadata__\" must be an object of strings, got " +
                      std::string(j.type_name()));
  }
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return file_error("\"__metadata__\" value of " + quoted(key) + " must be a string, got " +
                        value.type_name());
    }
    (*out)[key] = value.get<std::string>();
  }
  return Status::Ok();
}

// What one linear pass over the header text sees outside strings (skipping their escaped quotes):
// the deepest nesting of objects and lists, the entries of the top-level object and the values
// in every object and list. It stops as soon as one passes its limit. Where the text is not JSON
// the parser stops at the first error, and up to there it reads the same brackets and commas,
// so the document it builds is no deeper and no larger than counted here.
//
// The depth guard used to be a parser callback: nlohmann then scans the enclosing object for
// discarded values after every entry, so a header of n entries took time n^2 (431 s for 72,000
// entries, 4.4 MB, on the 2-core build machine; days for the 100 MB limit). Linear, a 100 MB header
// of 1.6 million empty entries still took 14 s and 1.5 GB as a document, hence the bounds on its
// size.
struct HeaderCounts {
  int depth = 0;        // deepest nesting
  int64_t entries = 0;  // members of the top-level object (an upper bound: commas + 1)
  int64_t values = 0;   // members and elements of every object and list (the same bound)
};

HeaderCounts count_header(const uint8_t* text, size_t length) {
  HeaderCounts n;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < length; ++i) {
    const uint8_t c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '{':
      case '[':
        n.depth = std::max(n.depth, ++depth);
        ++n.values;  // its first member (or none: an upper bound)
        n.entries += depth == 1;
        break;
      case '}':
      case ']':
        --depth;
        break;
      case ',':
        ++n.values;
        n.entries += depth == 1;
        break;
      default:
        break;
    }
    if (n.depth > kMaxJsonDepth || n.entries > kMaxSafetensorsEntries ||
        n.values > kMaxHeaderValues) {
      break;
    }
  }
  return n;
}

// json::parse's document builder, refusing a key given twice in one object where json::parse
// keeps the last one: a header naming a tensor twice was read as its last entry, and the run went
// on with it (the reference safetensors library refuses such files too). On a duplicate,
// `duplicate` is the key and `entry` the top-level entry it is in (the key itself at the top).
class UniqueKeysBuilder {
 public:
  explicit UniqueKeysBuilder(json* out) : dom_(*out) {}

  bool null() { return dom_.null(); }
  bool boolean(bool value) { return dom_.boolean(value); }
  bool number_integer(json::number_integer_t value) { return dom_.number_integer(value); }
  bool number_unsigned(json::number_unsigned_t value) { return dom_.number_unsigned(value); }
  bool number_float(json::number_float_t value, const json::string_t& text) {
    return dom_.number_float(value, text);
  }
  bool string(json::string_t& value) { return dom_.string(value); }
  bool binary(json::binary_t& value) { return dom_.binary(value); }
  bool start_object(size_t size) {
    ++depth_;
    keys_.emplace_back();
    return dom_.start_object(size);
  }
  bool key(json::string_t& key) {
    if (depth_ == 1) entry = key;
    if (!keys_.back().insert(key).second) {
      duplicate = key;
      return false;  // stops the parse
    }
    return dom_.key(key);
  }
  bool end_object() {
    --depth_;
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(size_t size) {
    ++depth_;
    return dom_.start_array(size);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(size_t position, const std::string& token, const Exception& error) {
    return dom_.parse_error(position, token, error);  // throws it
  }

  std::string entry, duplicate;
  int depth() const { return depth_; }

 private:
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::unordered_set<std::string>> keys_;  // of each enclosing object
  int depth_ = 0;                                      // enclosing objects and lists
};

// The message for a key given twice, naming the tensor (or "__metadata__").
Status duplicate_key_error(const UniqueKeysBuilder& builder) {
  const std::string entry = builder.entry == kMetadataKey ? std::string("\"__metadata__\"")
                                                          : "tensor " + quoted(builder.entry);
  if (builder.depth() == 1) return file_error(entry + " appears twice in the header");
  return file_error(entry + ": key " + quoted(builder.duplicate) + " appears twice");
}

Status parse_header(const uint8_t* text, size_t length, json* out) {
  const HeaderCounts n = count_header(text, length);
  if (n.depth > kMaxJsonDepth) {
    return file_error("header JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  if (n.entries > kMaxSafetensorsEntries) {
    return file_error("header holds more than " + std::to_string(kMaxSafetensorsEntries) +
                      " entries, this reader's limit (a problem file holds a few dozen)");
  }
  if (n.values > kMaxHeaderValues) {
    return file_error("header holds more than " + std::to_string(kMaxHeaderValues) +
                      " values in its objects and lists, this reader's limit");
  }
  try {
    UniqueKeysBuilder builder(out);
    if (!json::sax_parse(text, text + length, &builder)) return duplicate_key_error(builder);
  } catch (const json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; keep its position and reason.
    std::string_view why = e.what();
    if (const size_t tag_end = why.find("] "); tag_end != std::string_view::npos) {
      why.remove_prefix(tag_end + 2);
    }
    return file_error("header is not valid JSON: " + printable(why));
  }
  return Status::Ok();
}

Status parse_unchecked(const uint8_t* data, size_t size, SafetensorsFile* out) {
  if (size < kLengthBytes) {
    return file_error("file is " + std::to_string(size) +
                      " bytes, shorter than the 8-byte header length that starts every file");
  }
  uint64_t header_length = 0;
  for (size_t i = 0; i < kLengthBytes; ++i) header_length |= uint64_t{data[i]} << (8 * i);
  if (header_length > kMaxSafetensorsHeaderBytes) {
    return file_error("header length " + std::to_string(header_length) + " bytes is above the " +
                      std::to_string(kMaxSafetensorsHeaderBytes >> 20) +
                      " MB limit (not a safetensors file?)");
  }
  if (header_length > size - kLengthBytes) {
    return file_error("header length " + std::to_string(header_length) +
                      " bytes runs past the end of the file (" +
                      std::to_string(size - kLengthBytes) + " bytes follow the length)");
  }
  json header;
  if (Status s = parse_header(data + kLengthBytes, header_length, &header); !s.ok()) return s;
  if (!header.is_object()) {
    return file_error("header must be a JSON object, got " + std::string(header.type_name()));
  }

  const uint8_t* data_section = data + kLengthBytes + header_length;
  const uint64_t data_size = size - kLengthBytes - header_length;
  SafetensorsFile result;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (Status s = parse_metadata(value, &result.metadata); !s.ok()) return s;
      continue;
    }
    Entry e;
    if (Status s = parse_entry(key, value, data_size, &e); !s.ok()) return s;
    entries.push_back(std::move(e));
  }

  // Non-overlapping ranges keep the copies below the file's own size.
  std::vector<const Entry*> by_begin;
  for (const Entry& e : entries) {
    if (e.end > e.begin) by_begin.push_back(&e);
  }
  std::sort(by_begin.begin(), by_begin.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const Entry& prev = *by_begin[i - 1];
    const Entry& cur = *by_begin[i];
    if (cur.begin < prev.end) {
      return file_error("tensors " + quoted(prev.name) + " and " + quoted(cur.name) +
                        " overlap in the data section");
    }
  }

  for (Entry& e : entries) {
    HostTensor t(e.dtype, std::move(e.shape));
    if (!t.bytes.empty()) std::memcpy(t.bytes.data(), data_section + e.begin, t.bytes.size());
    result.tensors.emplace(std::move(e.name), std::move(t));
  }
  *out = std::move(result);
  return Status::Ok();
}

// --- writing ------------------------------------------------------------------------------

struct Layout {
  std::string header;  // JSON, padded with spaces
  std::vector<const HostTensor*> order;
};

Status plan_layout(const SafetensorsFile& file, Layout* layout) {
  std::vector<std::pair<const std::string*, const HostTensor*>> order;
  for (const auto& [name, t] : file.tensors) {
    const std::string what = "cannot write tensor " + quoted(name) + ": ";
    if (name == kMetadataKey) return file_error(what + "the name is reserved for metadata");
    if (name_of(t.dtype).empty()) {
      return file_error(what + "dtype " + std::string(dtype_name(t.dtype)) +
                        " has no safetensors name");
    }
    if (t.shape.size() > static_cast<size_t>(kMaxRank)) {
      return file_error(what + "rank " + std::to_string(t.shape.size()) + " is above " +
                        std::to_string(kMaxRank));
    }
    for (int64_t extent : t.shape) {
      if (extent < 0) return file_error(what + "negative extent in shape " + shape_text(t.shape));
    }
    if (t.bytes.size() != static_cast<size_t>(t.numel()) * dtype_size(t.dtype)) {
      return file_error(what + "holds " + std::to_string(t.bytes.size()) + " bytes, shape " +
                        shape_text(t.shape) + " needs " +
                        std::to_string(static_cast<size_t>(t.numel()) * dtype_size(t.dtype)));
    }
    order.emplace_back(&name, &t);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const size_t sa = dtype_size(a.second->dtype), sb = dtype_size(b.second->dtype);
    return sa != sb ? sa > sb : *a.first < *b.first;
  });

  json header = json::object();  // std::map underneath: keys come out sorted
  if (!file.metadata.empty()) header[std::string(kMetadataKey)] = file.metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    const uint64_t end = offset + t->bytes.size();
    header[*name] = {{"dtype", std::string(name_of(t->dtype))},
                     {"shape", t->shape},
                     {"data_offsets", {offset, end}}};
    offset = end;
    layout->order.push_back(t);
  }
  try {
    layout->header = header.dump();
  } catch (const json::exception&) {
    return file_error("cannot write: a tensor name or metadata string is not valid UTF-8");
  }
  // Pad so the data section starts 8-byte aligned.
  layout->header.append((kLengthBytes - layout->header.size() % kLengthBytes) % kLengthBytes, ' ');
  return Status::Ok();
}

void length_bytes(uint64_t n, uint8_t out[kLengthBytes]) {
  for (size_t i = 0; i < kLengthBytes; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
}

}  // namespace

Status parse_safetensors(const uint8_t* data, size_t size, SafetensorsFile* out) {
  if (data == nullptr && size != 0) return file_error("null data pointer");
  try {
    return parse_unchecked(data, size, out);
  } catch (const std::bad_alloc&) {
    return file_error("out of memory while reading the file");
  } catch (const std::exception& e) {  // nothing else should throw; never let it escape
    return file_error("malformed file: " + printable(e.what()));
  }
}

Status read_safetensors(const std::string& path, SafetensorsFile* out) {
  namespace fs = std::filesystem;
  const std::string where = std::string(kFileErrorPrefix) + path + ": ";
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return invalid_argument(where + "no such file");
  if (fs::is_directory(st)) return invalid_argument(where + "is a directory, not a file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return invalid_argument(where + "cannot get its size: " + ec.message());

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return invalid_argument(where + "cannot open: " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    return invalid_argument(where + "out of memory reading " + std::to_string(size) + " bytes");
  }
  if (size != 0 && std::fread(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) {
    return invalid_argument(where + "read failed: " + std::strerror(errno));
  }
  Status s = parse_safetensors(bytes.data(), bytes.size(), out);
  if (!s.ok()) s.message = where + s.message.substr(kFileErrorPrefix.size());
  return s;
}

Status serialize_safetensors(const SafetensorsFile& file, std::vector<uint8_t>* out) {
  Layout layout;
  if (Status s = plan_layout(file, &layout); !s.ok()) return s;
  size_t total = kLengthBytes + layout.header.size();
  for (const HostTensor* t : layout.order) total += t->bytes.size();
  out->assign(total, 0);
  length_bytes(layout.header.size(), out->data());
  uint8_t* p = out->data() + kLengthBytes;
  std::memcpy(p, layout.header.data(), layout.header.size());
  p += layout.header.size();
  for (const HostTensor* t : layout.order) {
    if (!t->bytes.empty()) std::memcpy(p, t->bytes.data(), t->bytes.size());
    p += t->bytes.size();
  }
  return Status::Ok();
}

namespace {

namespace fs = std::filesystem;

// The file a write to `path` replaces: `path` itself, or what its chain of symbolic links names
// (the link is kept, its target replaced), as the old fopen would have followed it.
fs::path write_target(const std::string& path) {
  fs::path target = path;
  std::error_code ec;
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) break;
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  return target;
}

// A new file beside `target`, created exclusively (mode 0666 less the umask, as fopen's).
int create_temporary(const fs::path& target, std::string* name) {
  static std::atomic<unsigned> counter{0};
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string file = ".";  // appended step by step: gcc 12 warns (-Wrestrict) on "." + s + ..
    file.append(target.filename().string());
    file.append(".partial-");
    file.append(std::to_string(::getpid()));
    file.append("-");
    file.append(std::to_string(counter++));
    *name = (dir / file).string();
    const int fd = ::open(name->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

// Writes the file's bytes to `f`; false with errno set on a failed write.
bool write_layout(std::FILE* f, const Layout& layout) {
  uint8_t length[kLengthBytes];
  length_bytes(layout.header.size(), length);
  bool ok = std::fwrite(length, 1, kLengthBytes, f) == kLengthBytes &&
            std::fwrite(layout.header.data(), 1, layout.header.size(), f) == layout.header.size();
  for (const HostTensor* t : layout.order) {
    if (!ok) break;
    ok = t->bytes.empty() || std::fwrite(t->bytes.data(), 1, t->bytes.size(), f) == t->bytes.size();
  }
  return ok && std::fflush(f) == 0;
}

}  // namespace

std::string output_path_problem(const std::string& path) {
  if (path.empty()) return "the path is empty";
  const fs::path target = write_target(path);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) return "is a directory";
  if (fs::exists(st)) {
    if (::access(target.c_str(), W_OK) != 0) return std::strerror(errno);
    if (!fs::is_regular_file(st)) return "";  // a device or a pipe: written in place
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::file_status dir_st = fs::status(dir, ec);
  if (!fs::exists(dir_st)) return "its directory does not exist";
  if (!fs::is_directory(dir_st)) return "its directory " + dir.string() + " is not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return "its directory is not writable: " + std::string(std::strerror(errno));
  }
  return "";
}

namespace {

// While one lives, SIGXFSZ is ignored where its action is the default, which kills the process: a
// write past the file-size limit (ulimit -f) then fails with EFBIG and its partial file is
// removed and reported, where the signal left it behind. Process-wide for that time: another
// thread's write past the limit then fails the same way instead of ending the process.
class IgnoreFileSizeSignal {
 public:
  IgnoreFileSizeSignal() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    active_ = ::sigaction(SIGXFSZ, nullptr, &old_) == 0 && old_.sa_handler == SIG_DFL &&
              ::sigaction(SIGXFSZ, &ignore, nullptr) == 0;
  }
  ~IgnoreFileSizeSignal() {
    if (active_) ::sigaction(SIGXFSZ, &old_, nullptr);
  }
  IgnoreFileSizeSignal(const IgnoreFileSizeSignal&) = delete;
  IgnoreFileSizeSignal& operator=(const IgnoreFileSizeSignal&) = delete;

 private:
  struct sigaction old_ {};
  bool active_ = false;
};

}  // namespace

SafetensorsWriter::~SafetensorsWriter() {
  discard();
}

void SafetensorsWriter::discard() {
  if (out_ != nullptr) std::fclose(out_);
  out_ = nullptr;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

Status SafetensorsWriter::open(const std::string& path) {
  discard();
  path_ = path;
  const std::string where = std::string(kFileErrorPrefix) + "cannot write " + path + ": ";
  if (path.empty()) return invalid_argument(where + "the path is empty");
  const fs::path target = write_target(path);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) return invalid_argument(where + "is a directory");
  target_ = target.string();

  // A device or a pipe (/dev/null, /dev/full, a FIFO) is written in place: never renamed over.
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    out_ = std::fopen(target_.c_str(), "wb");
    if (out_ == nullptr) return invalid_argument(where + std::strerror(errno));
    return Status::Ok();
  }
  // Anything else: the bytes go to a new file beside the target, which replaces it by a rename
  // only once complete and on disk. A failed write, a full disk or a killed process leaves the
  // target as it was (and at worst a hidden ".NAME.partial-PID-N" file beside it); the target is
  // never a truncated or part-written file that could be read as a problem. Created here, so
  // that a directory where no file can be created (a read-only file system, /proc, /sys: access()
  // does not tell, least of all to root) is found before the caller's work, not after it.
  std::string temp;
  const int fd = create_temporary(target, &temp);
  if (fd < 0) {
    return invalid_argument(where + "cannot create the temporary file " + temp +
                            " beside it: " + std::strerror(errno));
  }
  temp_ = temp;
  out_ = ::fdopen(fd, "wb");
  if (out_ == nullptr) {
    const int error = errno;
    ::close(fd);
    discard();
    return invalid_argument(where + std::strerror(error));
  }
  return Status::Ok();
}

Status SafetensorsWriter::write(const SafetensorsFile& file) {
  const std::string where = std::string(kFileErrorPrefix) + "cannot write " + path_ + ": ";
  if (out_ == nullptr) return invalid_argument(where + "not open (open() first, write() once)");
  Layout layout;
  if (Status s = plan_layout(file, &layout); !s.ok()) {
    discard();
    return s;
  }
  bool ok = false;
  int error = 0;
  {
    const IgnoreFileSizeSignal file_size_signal_ignored;
    // Streamed tensor by tensor: no second copy of a multi-GB problem in memory.
    ok = write_layout(out_, layout) && (temp_.empty() || ::fsync(::fileno(out_)) == 0);
    error = errno;
    const bool closed = std::fclose(out_) == 0;
    out_ = nullptr;
    if (ok && !closed) {
      ok = false;
      error = errno;
    }
  }
  if (ok && !temp_.empty()) {
    // The replaced file's permissions carry over (a new one gets 0666 less the umask).
    std::error_code ec;
    const fs::file_status st = fs::status(target_, ec);
    if (fs::is_regular_file(st)) fs::permissions(temp_, st.permissions(), ec);
    ok = ::rename(temp_.c_str(), target_.c_str()) == 0;
    error = errno;
    if (ok) temp_.clear();
  }
  if (ok) return Status::Ok();
  const bool partial = !temp_.empty();
  discard();
  return invalid_argument(where + std::strerror(error) +
                          (partial ? " (the partial file was removed)" : ""));
}

Status write_safetensors(const std::string& path, const SafetensorsFile& file) {
  SafetensorsWriter writer;
  if (Status s = writer.open(path); !s.ok()) return s;
  return writer.write(file);
}

Status problem_from_safetensors(const SafetensorsFile& file, const OpIo& op, HostProblem* problem,
                                std::map<std::string, HostTensor>* expected) {
  HostProblem p;
  p.op = op.name;
  const std::vector<std::string> inputs = op.input_names();
  const std::vector<std::string> outputs_named = op.output_names();
  auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  auto joined = [](const std::vector<std::string>& names) {
    std::string text;
    for (const std::string& n : names) text += (text.empty() ? "" : " ") + n;
    return text;
  };
  std::map<std::string, HostTensor> outputs;
  for (const auto& [name, t] : file.tensors) {
    if (listed(outputs_named, name)) {
      outputs[name] = t;
    } else if (listed(inputs, name)) {
      p.tensors[name] = t;
    } else {
      return file_error("unexpected tensor " + quoted(name) + " for " + op.name + " (inputs are " +
                        joined(inputs) + "; outputs " + joined(outputs_named) + ")");
    }
  }
  for (const std::string& name : op.required_inputs()) {
    if (!p.has(name)) return file_error("missing input tensor " + quoted(name) + " of " + op.name);
  }
  if (Status s = op.options_from_metadata(file.metadata, &p); !s.ok()) return s;
  if (Status s = op.check_output_sizes(p); !s.ok()) return s;

  p.allocate_outputs();
  if (Status s = op.validate(p); !s.ok()) {
    return file_error("the tensors do not form a valid problem: " + s.message);
  }
  for (const auto& [name, t] : outputs) {
    const HostTensor& out = p.get(name);
    if (t.shape != out.shape) {
      return file_error("tensor " + quoted(name) + " has shape " + shape_text(t.shape) +
                        ", but the output is " + shape_text(out.shape));
    }
    // Compared value by value later: a wrong dtype would read as a numeric mismatch there.
    if (t.dtype != out.dtype) {
      return file_error("tensor " + quoted(name) + " has dtype " + std::string(name_of(t.dtype)) +
                        ", but the output is " + std::string(name_of(out.dtype)));
    }
  }
  *problem = std::move(p);
  if (expected) *expected = std::move(outputs);
  return Status::Ok();
}

SafetensorsFile problem_to_safetensors(const HostProblem& problem) {
  SafetensorsFile file;
  file.tensors = problem.tensors;
  op_of(problem).options_to_metadata(problem, &file.metadata);
  return file;
}

}  // namespace kda::io
