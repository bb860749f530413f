#pragma once
// `kda run <op>` options every operator takes: declared on the operator's CLI11 subcommand, then
// turned into a backend, a kernel and the basics of a generated problem with messages that name
// the bad option. The parsing helpers here are shared with the operators' own options (ops/).

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kda/backend.hpp"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda::cli {

struct RunOptions {
  // Where the problem comes from: exactly one of these.
  std::string input;  // a safetensors file laid out like shared/golden
  std::string shape;  // generated inputs: the operator's sizes ("B,T,H,K,V", ...)
  // Generated problems only (the operators add their own: ops/<op>.cpp).
  int64_t chunk_size = 64;
  std::string dtype = "bf16";
  std::string beta_dtype = "x";
  std::string seqlens;  // "1300,547,...": varlen, B must be 1 and T the sum
  bool pass_chunk_indices = false;
  uint64_t seed = 0;
  // Either source.
  std::string output;
  bool output_given = false;  // -o was given (its value may then be empty: refused)
  std::string backend;        // empty: cuda when available, else cpu
  std::string kernel;  // auto, simt, sm80_mma (cuda kernels); empty: $KDA_CUDA_KERNEL, else auto
  int repeat = 0;      // 0: the backend's default (see default_repeat)
  bool check = false;
};

// Marks an option as one that describes a generated problem: --input excludes it.
class GeneratedOption {
 public:
  explicit GeneratedOption(CLI::Option* input) : input_(input) {}
  CLI::Option* operator()(CLI::Option* option) const { return option->excludes(input_); }

 private:
  CLI::Option* input_;
};

// Declares the options every operator takes on its subcommand; --shape takes `shape_names`
// ("B", "T", ...; e.g. `shape_example`). Returns the marker for the operator's own options of
// generated problems.
GeneratedOption add_run_options(CLI::App* command, std::span<const char* const> shape_names,
                                const std::string& shape_example, RunOptions* o);

// Refuses an empty value for every option of `command` that takes one, naming the option: "" once
// meant the default for some (--seqlens, --backend, --scale) and was refused by others. Call it
// once all of the command's options are declared.
void refuse_empty_values(CLI::App* command);

// --heads-v (value heads, default H), for the operators that have them: a given value must be
// positive (0 stands for "not given" in the configs).
CLI::Option* add_heads_v_option(CLI::App* command, int64_t* heads_v);

// The --backend value, or the default: cuda when built in and a device is visible, else cpu.
Status resolve_backend(const RunOptions& options, Backend* backend);
// The --kernel value, or without it the kernel the environment variable KDA_CUDA_KERNEL names
// (read here, at the command's edge; the library reads no environment), else auto. A usage error
// naming the option or the variable when unknown.
Status resolve_kernel(const RunOptions& options, Kernel* kernel);
// Timed runs when --repeat is not given: enough for a stable median on a GPU, few on a CPU.
int default_repeat(Backend backend);
// Refuses an --input file whose problem cannot fit in host memory (the file is read whole, its
// tensors copied out and the outputs allocated: about three times its size), before reading it.
// Host memory here and in check_host_memory is the physical memory or, when it leaves less, the
// process's address-space limit (ulimit -v, RLIMIT_AS); the message says which.
Status check_input_fits(const std::string& path);

// "B,T,H,K,V" from {"B", "T", "H", "K", "V"}, from `first` on.
std::string shape_text(std::span<const char* const> names, size_t first = 0);

// ---- helpers for the operators' generated problems (ops/<op>.cpp) ------------------------------

// The whole of `text` as a T: no leading space or '+', nothing after the number, in T's range (so
// no sign for an unsigned T).
template <typename T>
bool parse_whole(std::string_view text, T* value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size();
}

// The generic options of a generated problem, parsed and checked against each other.
struct GeneratedBasics {
  std::vector<int64_t> dims;  // --shape, one per name of the operator's shape
  int64_t chunk_size = 64;
  DType x_dtype = DType::bf16;
  DType beta_dtype = DType::bf16;
  std::vector<int64_t> seqlens;  // non-empty: varlen (dims[0] == 1, dims[1] == their sum)
  bool pass_chunk_indices = false;
  uint64_t seed = 0;
};

// Parses --shape as the operator's sizes `shape_names` (which start with B, T), --chunk-size,
// --dtype, --beta-dtype, --seqlens, --chunk-indices and --seed.
Status parse_generated_basics(const RunOptions& options, std::span<const char* const> shape_names,
                              GeneratedBasics* out);
// --h-dtype and the like: "fp32", or "x" for the dtype X.
Status parse_x_or_fp32(const std::string& option, const std::string& text, DType x_dtype,
                       DType* out);
// Refuses up front a generated problem of `bytes` (every input and output, in double so absurd
// shapes cannot overflow) that cannot fit in host memory, rather than fail (or be killed) halfway
// through filling it.
Status check_host_memory(double bytes);

}  // namespace kda::cli
