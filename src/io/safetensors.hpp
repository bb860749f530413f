#pragma once
// A small safetensors reader/writer of our own. Format: 8-byte little-endian header length N, N
// bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}}),
// then the raw data. Malformed files are rejected with a clear error, never read out of bounds.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/status.hpp"

namespace kda::io {

struct SafetensorsFile {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Headers longer than this are rejected before any allocation (real ones are a few KB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;
// Entries (tensors and "__metadata__") in one header: counted before the JSON is parsed, so a
// hostile header cannot make the parse take seconds and gigabytes. A problem file holds a few
// dozen; model checkpoints, a few thousand per file.
inline constexpr int64_t kMaxSafetensorsEntries = int64_t{1} << 16;

// Parses an in-memory file (the fuzzing entry point): safe on arbitrary bytes. On failure the
// status is invalid_argument with a one-line message starting "safetensors: " and *out is left
// untouched. The header's JSON nests at most 8 deep, holds at most kMaxSafetensorsEntries entries
// and 16 times as many values in all (checked in one pass before it is parsed, which takes time
// linear in its size). A key given twice in one object (a tensor named twice) is refused, naming
// it. Tensor byte ranges must not overlap (so the copy never exceeds the file's size) and ranks
// are at most kMaxRank; bytes after the last tensor are ignored.
Status parse_safetensors(const uint8_t* data, size_t size, SafetensorsFile* out);
Status read_safetensors(const std::string& path, SafetensorsFile* out);

// Deterministic: JSON keys sorted, tensors laid out by element size (largest first) then name so
// every tensor is naturally aligned, header padded with spaces to a multiple of 8 bytes.
Status serialize_safetensors(const SafetensorsFile& file, std::vector<uint8_t>* out);
// Writes to a temporary file beside `path` (in its directory, after following symbolic links)
// and renames it over `path` once complete: a failed or interrupted write leaves an existing file
// as it was, and a failed one (a full disk, the file-size limit) removes its temporary file. A
// device or pipe (/dev/null) is written in place.
Status write_safetensors(const std::string& path, const SafetensorsFile& file);

// write_safetensors in two steps, for a caller with work to do between them: open() creates the
// temporary file (or opens the device or pipe), so that a path nothing can be written to is
// refused before the work, saying what failed; write() fills it and renames it over the target,
// once. Destroyed before a successful write(), it removes the temporary file.
class SafetensorsWriter {
 public:
  SafetensorsWriter() = default;
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  Status open(const std::string& path);
  Status write(const SafetensorsFile& file);

 private:
  void discard();  // closes the file and removes the temporary one

  std::string path_;    // as given, for messages
  std::string target_;  // the file replaced (symbolic links followed)
  std::string temp_;    // the temporary file; empty when writing in place or done
  std::FILE* out_ = nullptr;
};

// Why write_safetensors(path) could not write there, checked without writing (a directory, a
// missing or read-only directory, a read-only file), or "" when it can: for a caller that wants
// to know before doing the work.
std::string output_path_problem(const std::string& path);

// Builds a problem of operator `op` from a file laid out like ../shared/golden*/: inputs and
// expected outputs under their argument-table names ("q", ..., "out.dq"), options in the
// metadata (each operator's defaults: see its host.cpp). Tensors named like outputs go to
// *expected. Outputs are allocated and poisoned. The result is checked with the operator's
// validate(), so a file that loads also runs.
Status problem_from_safetensors(const SafetensorsFile& file, const OpIo& op, HostProblem* problem,
                                std::map<std::string, HostTensor>* expected);

// Every tensor of `problem` (inputs and outputs) under its name, and its options as metadata.
SafetensorsFile problem_to_safetensors(const HostProblem& problem);

}  // namespace kda::io
