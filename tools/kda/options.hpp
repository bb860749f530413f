#pragma once
// `kda run` options: declared on a CLI11 subcommand, then turned into a backend and a problem
// configuration with messages that name the bad option.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "io/host_problem.hpp"
#include "kda/run.hpp"
#include "kda/status.hpp"

namespace kda::cli {

struct RunOptions {
  // Where the problem comes from: exactly one of these.
  std::string input;  // a safetensors file laid out like shared/golden
  std::string shape;  // "B,T,H,K,V": generated inputs
  // Generated problems only.
  int64_t heads_v = 0;  // 0: HV = H
  int64_t chunk_size = 64;
  std::string dtype = "bf16";
  std::string h_dtype = "fp32";
  std::string beta_dtype = "x";
  std::string seqlens;  // "1300,547,...": varlen, B must be 1 and T the sum
  std::string scale;    // empty: None (K ** -0.5)
  bool state_v_first = false;
  bool pass_chunk_indices = false;
  uint64_t seed = 0;
  // Either source.
  std::string output;
  std::string backend;  // empty: cuda when available, else cpu
  int repeat = 0;       // 0: the backend's default (see default_repeat)
  bool check = false;
};

void add_run_options(CLI::App* run, RunOptions* options);

// The --backend value, or the default: cuda when built in and a device is visible, else cpu.
Status resolve_backend(const RunOptions& options, Backend* backend);
// Timed runs when --repeat is not given: enough for a stable median on a GPU, few on a CPU.
int default_repeat(Backend backend);
// Parses --shape and the options that shape a generated problem.
Status make_problem_config(const RunOptions& options, io::ProblemConfig* config);
// Refuses an --input file whose problem cannot fit in host memory (the file is read whole, its
// tensors copied out and the outputs allocated: about three times its size), before reading it.
Status check_input_fits(const std::string& path);

}  // namespace kda::cli
