#pragma once
// The file checks of the state scans (chunk_bwd_dhu, chunk_fwd_h), written once: their outputs
// take their sizes from the anchor [B, T, H, K], w [B, T, HV, K], the values [B, T, HV, V] and
// the chunks (cu_seqlens, chunk_indices, chunk_size). Those must agree, and the outputs stay
// within `outputs_per_input_byte` times the inputs' bytes (plus 64 MiB) before any is allocated,
// so a hostile file cannot make us allocate far more than it holds: the states' HV K V per
// sequence and per chunk are not bounded by any one input.

#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/validate_args.hpp"
#include "io/host_problem.hpp"
#include "io/op_io_support.hpp"

namespace kda::io {

struct ScanFileNames {
  const char* anchor;                         // [B, T, H, K]: "q" or "k"
  std::initializer_list<const char*> values;  // [B, T, HV, V], the first sizing the values' output
  const char* states;                         // the per-chunk states' output, for messages
  const char* final_state;                    // the per-sequence state's output, for messages
  double outputs_per_input_byte;
};

inline Status expect_rank(const HostProblem& hp, const char* name, size_t rank,
                          const char* symbolic) {
  const HostTensor& t = hp.get(name);
  if (t.shape.size() != rank) {
    return file_error(std::string("input \"") + name + "\": expected rank " + std::to_string(rank) +
                      " " + symbolic + ", got " + shape_text(t.shape));
  }
  return Status::Ok();
}

template <typename P>
Status check_scan_output_sizes(const HostProblem& hp, const ScanFileNames& n) {
  constexpr double kOutputSlack = 64.0 * (1 << 20);
  if (Status s = expect_rank(hp, n.anchor, 4, "[B, T, H, K]"); !s.ok()) return s;
  if (Status s = expect_rank(hp, "w", 4, "[B, T, HV, K]"); !s.ok()) return s;
  for (const char* name : n.values) {
    if (Status s = expect_rank(hp, name, 4, "[B, T, HV, V]"); !s.ok()) return s;
  }
  const std::vector<int64_t>& a = hp.get(n.anchor).shape;
  const HostTensor& first_values = hp.get(*n.values.begin());
  const int64_t B = a[0], T = a[1], K = a[3], HV = hp.get("w").shape[2];
  const int64_t V = first_values.shape[3];
  if (hp.get("w").shape != std::vector<int64_t>{B, T, HV, K}) {
    return file_error(
        "input \"w\": expected [B, T, HV, K] with B, T, K = " + shape_text({B, T, K}) + " from " +
        n.anchor + ", got " + shape_text(hp.get("w").shape));
  }
  for (const char* name : n.values) {
    if (hp.get(name).shape != std::vector<int64_t>{B, T, HV, V}) {
      const std::string first = *n.values.begin();
      return file_error(std::string("input \"") + name +
                        "\": expected [B, T, HV, V] with B, T, HV = " + shape_text({B, T, HV}) +
                        " from " + n.anchor + ", w" +
                        (name == first ? "" : " and V = " + std::to_string(V) + " from " + first) +
                        ", got " + shape_text(hp.get(name).shape));
    }
  }
  if (hp.has("cu_seqlens")) {
    if (Status s = expect_rank(hp, "cu_seqlens", 1, "[N + 1]"); !s.ok()) return s;
  }
  if (hp.has("chunk_indices")) {
    if (Status s = expect_rank(hp, "chunk_indices", 2, "[NT, 2]"); !s.ok()) return s;
  }
  const P p = hp.as<P>();
  validation::ChunkCount chunks;
  Status counted = validation::check_chunk_size(p.chunk_size);
  if (counted.ok()) {
    counted =
        validation::check_chunks(p.cu_seqlens, p.chunk_indices, B, T, p.chunk_size, -1, &chunks);
  }
  if (!counted.ok()) return file_error("the chunks: " + counted.message);

  const auto x = static_cast<double>(dtype_size(hp.get(n.anchor).dtype));
  const double state = static_cast<double>(HV) * static_cast<double>(K) * static_cast<double>(V);
  const double outputs = static_cast<double>(B) * static_cast<double>(chunks.NT) * state * x +
                         static_cast<double>(chunks.num_seqs) * state * 4 +
                         static_cast<double>(first_values.bytes.size());
  double inputs = 0.0;
  for (const auto& [name, t] : hp.tensors) inputs += static_cast<double>(t.bytes.size());
  if (outputs > n.outputs_per_input_byte * inputs + kOutputSlack) {
    char text[160];
    std::snprintf(text, sizeof text, "%.3g bytes, more than %g times the inputs' %.3g plus 64 MiB",
                  outputs, n.outputs_per_input_byte, inputs);
    return file_error("the outputs would take " + std::string(text) + " (" + n.states + " " +
                      shape_text({B, chunks.NT, HV, K, V}) + ", " + n.final_state + " for " +
                      std::to_string(chunks.num_seqs) + " sequences)");
  }
  return Status::Ok();
}

}  // namespace kda::io
