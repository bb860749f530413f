#pragma once
// Typed reads of safetensors metadata entries (strings), with errors naming the key.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kda/status.hpp"

namespace kda::io {

using Metadata = std::map<std::string, std::string>;

// Absent, "None" or "none" -> nullopt; else a finite number.
Status metadata_optional_double(const Metadata& m, const char* key, std::optional<double>* out);
// Absent -> `fallback`; else an integer.
Status metadata_int(const Metadata& m, const char* key, int64_t fallback, int64_t* out);
// Absent -> false; else true/True/1 or false/False/0.
Status metadata_bool(const Metadata& m, const char* key, bool* out);
// Absent or equal to `expected`; else an error naming the key and why.
Status metadata_expect(const Metadata& m, const char* key, const std::string& expected,
                       const std::string& why);
// Writes a double so that it reads back exactly.
std::string metadata_double_text(double value);

}  // namespace kda::io
