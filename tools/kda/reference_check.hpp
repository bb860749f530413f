#pragma once
// Judging a backend's outputs: against the expected tensors a file carries (golden bar), or
// against the float64 cpu-ref backend (SPEC pass bar) -- on the whole problem when it is small,
// else on a sample of chunks.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/problem.hpp"
#include "kda/status.hpp"

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

// Compares the outputs of `problem` with expected tensors (by output name) using golden_bar.
CheckReport check_against_expected(const io::HostProblem& problem,
                                   const std::map<std::string, io::HostTensor>& expected);

// Runs cpu-ref and compares using pass_bar. Small problems are recomputed whole. Large ones on a
// reduced problem: each sampled chunk (all heads) becomes its own sequence of a varlen batch with
// its h, dh gathered to [1, n_sampled, HV, ...]; the corresponding rows of the full outputs are
// compared with it. The per-chunk math only reads the chunk's rows and states, so the reduced
// problem gives exactly the rows cpu-ref would give on the full one.
Status check_against_reference(const io::HostProblem& problem, const Dims& dims, uint64_t seed,
                               CheckReport* report);

}  // namespace kda::cli
