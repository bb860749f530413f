#include "io/metadata.hpp"

#include <charconv>
#include <cmath>

#include "io/op_io_support.hpp"

namespace kda::io {

namespace {

std::string quoted(const std::string& s) {
  return "\"" + s + "\"";
}

}  // namespace

Status metadata_optional_double(const Metadata& m, const char* key, std::optional<double>* out) {
  const auto it = m.find(key);
  if (it == m.end() || it->second == "None" || it->second == "none") {
    out->reset();
    return Status::Ok();
  }
  const std::string& text = it->second;
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return file_error(std::string("metadata \"") + key +
                      "\": expected a finite number or None, got " + quoted(text));
  }
  *out = value;
  return Status::Ok();
}

Status metadata_int(const Metadata& m, const char* key, int64_t fallback, int64_t* out) {
  const auto it = m.find(key);
  if (it == m.end()) {
    *out = fallback;
    return Status::Ok();
  }
  const std::string& text = it->second;
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return file_error(std::string("metadata \"") + key + "\": expected an integer, got " +
                      quoted(text));
  }
  *out = value;
  return Status::Ok();
}

Status metadata_bool(const Metadata& m, const char* key, bool* out) {
  const auto it = m.find(key);
  if (it == m.end()) {
    *out = false;
    return Status::Ok();
  }
  const std::string& v = it->second;
  if (v == "true" || v == "True" || v == "1") {
    *out = true;
  } else if (v == "false" || v == "False" || v == "0") {
    *out = false;
  } else {
    return file_error(std::string("metadata \"") + key + "\": expected true, false, 1 or 0, got " +
                      quoted(v));
  }
  return Status::Ok();
}

Status metadata_expect(const Metadata& m, const char* key, const std::string& expected,
                       const std::string& why) {
  const auto it = m.find(key);
  if (it == m.end() || it->second == expected) return Status::Ok();
  return file_error(std::string("metadata \"") + key + "\" is " + quoted(it->second) + "; " + why);
}

std::string metadata_double_text(double value) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);  // round-trips
  return ec == std::errc() ? std::string(buf, end) : std::string("None");
}

}  // namespace kda::io
