#pragma once
// A small safetensors reader/writer of our own. Format: 8-byte little-endian header length N, N
// bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}}),
// then the raw data. Malformed files are rejected with a clear error, never read out of bounds.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "io/host_problem.hpp"
#include "kda/status.hpp"

namespace kda::io {

struct SafetensorsFile {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses an in-memory file (the fuzzing entry point).
Status parse_safetensors(const uint8_t* data, size_t size, SafetensorsFile* out);
Status read_safetensors(const std::string& path, SafetensorsFile* out);
Status write_safetensors(const std::string& path, const SafetensorsFile& file);

// Builds a problem from a file laid out like shared/golden: inputs by SPEC name, metadata
// `scale`, `chunk_size`, `state_v_first`. Tensors named `out.<name>` go to *expected (dv_out as
// `out.dv_out`), keyed by output name. Outputs are allocated and poisoned.
Status problem_from_safetensors(const SafetensorsFile& file, HostProblem* problem,
                                std::map<std::string, HostTensor>* expected);

// The six outputs of `problem` as `out.<name>` tensors, plus its inputs and metadata.
SafetensorsFile problem_to_safetensors(const HostProblem& problem);

}  // namespace kda::io
