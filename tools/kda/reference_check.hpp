#pragma once
// Judging a backend's outputs: against the expected tensors a file carries (the operator's golden
// bar), or against the float64 cpu-ref backend (its SPEC pass bar) -- on the whole problem when it
// is small, else on a sample of chunks.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/status.hpp"
#include "op_cli.hpp"

namespace kda::cli {

struct OutputError {
  std::string name;
  double err = 0.0;  // err_ratio; NaN when the output holds NaN/Inf where the reference does not
  double bar = 0.0;
  bool within_bar() const { return err <= bar; }  // false for NaN
};

struct CheckReport {
  std::string against;   // "the file's out.* tensors", "cpu-ref (float64)"
  std::string bar_name;  // "golden bar", "SPEC pass bar"
  std::string scope;     // what was compared: all rows, or which chunks were sampled
  std::vector<OutputError> errors;
  bool passed() const;
};

// Above this many (chunk, value head) pairs cpu-ref runs on a sample of chunks only.
inline constexpr int64_t kFullCheckMaxChunkHeads = 512;
// Chunks in a sample: the first, the last and the rest drawn at random.
inline constexpr int64_t kSampledChunks = 8;

// Compares the outputs of `problem` with expected tensors (by output name) using the operator's
// golden bar.
CheckReport check_against_expected(const io::OpIo& op, const io::HostProblem& problem,
                                   const ProblemSummary& summary,
                                   const std::map<std::string, io::HostTensor>& expected);

// Runs cpu-ref and compares using the operator's pass bar. Small problems, and those of an
// operator whose chunks are not independent (OpCli::chunks_are_independent), are recomputed whole.
// Large ones on a reduced problem: each sampled chunk (all heads) becomes its own sequence of a
// varlen batch, with the inputs of cli.chunk_inputs() gathered by chunk and the others by token
// rows; the corresponding rows of the full outputs are compared with it. The per-chunk math only
// reads the chunk's rows and states, so the reduced problem gives exactly the rows cpu-ref would
// give on the full one. `problem` is left as it was (its tensors are set aside while its options
// are copied).
Status check_against_reference(const io::OpIo& op, const OpCli& cli, io::HostProblem* problem,
                               const ProblemSummary& summary, uint64_t seed, CheckReport* report);

}  // namespace kda::cli
