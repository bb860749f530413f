#include "options.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace kda::cli {

namespace {

Status usage(const std::string& message) {
  return invalid_argument(message);
}

// "a,b,c" -> integers; every entry must be an integer >= min_value.
Status parse_int_list(const std::string& option, const std::string& text, int64_t min_value,
                      std::vector<int64_t>* out) {
  out->clear();
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    int64_t value = 0;
    if (!parse_whole(item, &value) || value < min_value) {
      return usage(option + ": expected comma-separated integers >= " + std::to_string(min_value) +
                   ", got '" + text + "'");
    }
    out->push_back(value);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return Status::Ok();
}

Status parse_x_dtype(const std::string& text, DType* out) {
  if (text == "bf16" || text == "bfloat16") {
    *out = DType::bf16;
  } else if (text == "fp16" || text == "float16") {
    *out = DType::f16;
  } else if (text == "fp32" || text == "float32") {
    *out = DType::f32;
  } else {
    return usage("--dtype: expected bf16, fp16 or fp32, got '" + text + "'");
  }
  return Status::Ok();
}

std::string count_word(size_t n) {
  static const char* const words[] = {"zero", "one", "two",   "three", "four",
                                      "five", "six", "seven", "eight", "nine"};
  return n < std::size(words) ? words[n] : std::to_string(n);
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size)
                                    : 0.0;
}

// The process's address space in use now (mappings: code, stacks, malloc's arenas).
double address_space_in_use() {
  unsigned long pages = 0;
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0.0;
  if (std::fscanf(statm, "%lu", &pages) != 1) pages = 0;
  std::fclose(statm);
  return static_cast<double>(pages) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

// What a problem's memory must fit in: this machine's physical memory or, when it leaves less,
// the process's address-space limit (ulimit -v), which allocations hit first (a shape admitted
// by physical memory alone failed there, late, with a bare "out of memory"). `room` is what the
// problem may take (0: unknown), `text` says which bound it is and how large.
struct MemoryBound {
  double room = 0.0;
  std::string text;
};

MemoryBound memory_bound() {
  char text[160];
  const double physical = physical_memory_bytes();
  std::snprintf(text, sizeof text, "this machine has %.1f GB", physical * 1e-9);
  MemoryBound bound{physical, text};
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const double total = static_cast<double>(limit.rlim_cur), used = address_space_in_use();
    const double room = std::max(total - used, 0.0);
    if (physical <= 0 || room < physical) {
      std::snprintf(text, sizeof text, "the process's address-space limit (ulimit -v) is %.1f GB",
                    total * 1e-9);
      if (used >= 0.05e9) {
        const size_t end = std::strlen(text);
        std::snprintf(text + end, sizeof text - end, ", %.1f GB of it in use", used * 1e-9);
      }
      bound = {room, text};
    }
  }
  return bound;
}

}  // namespace

std::string shape_text(std::span<const char* const> names, size_t first) {
  std::string text;
  for (size_t i = first; i < names.size(); ++i) {
    text += (i > first ? "," : "") + std::string(names[i]);
  }
  return text;
}

GeneratedOption add_run_options(CLI::App* run, std::span<const char* const> shape_names,
                                const std::string& shape_example, RunOptions* o) {
  CLI::Option* input = run->add_option("-i,--input", o->input,
                                       "safetensors file with inputs by argument name (like "
                                       "shared/golden); its out.* tensors, if any, are the "
                                       "expected outputs");
  CLI::Option* shape = run->add_option(
      "-s,--shape", o->shape,
      "generate inputs of shape " + shape_text(shape_names) + " (e.g. " + shape_example + ")");
  input->excludes(shape);
  const GeneratedOption generated(input);
  // Checked here, naming the option: 100000000 was blamed on --shape by the memory estimate,
  // and CLI11 alone would clamp 10^23 to 2^63 - 1.
  const CLI::Validator chunk_size(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        if (!parse_whole(text, &value) || (value != 16 && value != 32 && value != 64)) {
          return "expected 16, 32 or 64, got '" + text + "'";
        }
        return "";
      },
      "BT");
  generated(run->add_option("--chunk-size", o->chunk_size, "chunk size BT: 16, 32 or 64")
                ->check(chunk_size)
                ->capture_default_str());
  generated(run->add_option("--dtype", o->dtype, "X: bf16, fp16 or fp32")->capture_default_str());
  generated(run->add_option("--beta-dtype", o->beta_dtype, "beta: x (the dtype X) or fp32")
                ->capture_default_str());
  generated(run->add_option("--seqlens", o->seqlens,
                            "variable length: sequence lengths L1,L2,... (B must be 1 and T "
                            "their sum)"));
  generated(run->add_flag("--chunk-indices", o->pass_chunk_indices,
                          "with --seqlens: pass chunk_indices too (else derived)"));
  // CLI11 would clamp an out-of-range value (-1, 2^64) to the type's limit: refuse it instead.
  const CLI::Validator whole_uint64(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        if (!parse_whole(text, &value)) {
          return "expected an integer from 0 to 18446744073709551615, got '" + text + "'";
        }
        return "";
      },
      "UINT64");
  generated(run->add_option("--seed", o->seed, "random seed for the inputs")
                ->check(whole_uint64)
                ->capture_default_str());

  // Checked before the run (run_command.cpp); a given but empty path is refused, not ignored.
  run->add_option_function<std::string>(
      "-o,--output",
      [o](const std::string& path) {
        o->output = path;
        o->output_given = true;
      },
      "write the inputs and the outputs (out.*) here (never the --input file)");
  run->add_option("-b,--backend", o->backend,
                  "cpu-ref, cpu or cuda (default: cuda when available, else cpu)");
  run->add_option("--kernel", o->kernel,
                  "cuda kernel: auto, simt or sm80_mma (cpu backends take auto; default: "
                  "$KDA_CUDA_KERNEL, else auto)");
  run->add_option("--repeat", o->repeat,
                  "timed runs after one warm-up (default: cuda 20, cpu 3, cpu-ref 1)")
      ->check(CLI::Range(1, 100000));
  run->add_flag("--check", o->check,
                "exit 1 when an output's err_ratio is above its bar (SPEC pass bar against "
                "cpu-ref, golden bar against the file's out.* tensors); with --backend cpu-ref "
                "the file's out.* tensors are the only reference, so every output needs one");
  return generated;
}

void refuse_empty_values(CLI::App* command) {
  const CLI::Validator non_empty(
      [](std::string& text) -> std::string {
        return text.empty() ? "expected a value, got ''" : "";
      },
      "");  // no description: the help text stays as it was
  for (CLI::Option* option : command->get_options()) {
    if (option->get_type_size_max() > 0) option->check(non_empty);  // flags take none
  }
}

CLI::Option* add_heads_v_option(CLI::App* run, int64_t* heads_v) {
  const CLI::Validator positive(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        if (!parse_whole(text, &value) || value < 1) {
          return "expected a positive number of value heads, got '" + text + "'";
        }
        return "";
      },
      "POSITIVE");
  return run->add_option("--heads-v", *heads_v, "value heads HV (default: H)")->check(positive);
}

Status resolve_backend(const RunOptions& o, Backend* backend) {
  if (o.backend.empty()) {
    *backend = backend_available(Backend::cuda) ? Backend::cuda : Backend::cpu;
    return Status::Ok();
  }
  if (Status s = parse_backend(o.backend, backend); !s.ok()) {
    return usage("--backend: expected cpu-ref, cpu or cuda, got '" + o.backend + "'");
  }
  return Status::Ok();
}

Status resolve_kernel(const RunOptions& o, Kernel* kernel) {
  if (!o.kernel.empty()) return parse_kernel(o.kernel, kernel, "--kernel");
  const char* env = std::getenv("KDA_CUDA_KERNEL");
  if (env == nullptr || *env == '\0') {
    *kernel = Kernel::auto_;
    return Status::Ok();
  }
  if (Status s = parse_kernel(env, kernel, "environment variable KDA_CUDA_KERNEL"); !s.ok()) {
    return usage(s.message);
  }
  return Status::Ok();
}

int default_repeat(Backend backend) {
  switch (backend) {
    case Backend::cuda:
      return 20;
    case Backend::cpu:
      return 3;
    case Backend::cpu_ref:
      return 1;
  }
  return 1;
}

Status parse_generated_basics(const RunOptions& o, std::span<const char* const> names,
                              GeneratedBasics* b) {
  if (Status s = parse_int_list("--shape", o.shape, 1, &b->dims); !s.ok()) return s;
  if (b->dims.size() != names.size()) {
    return usage("--shape: expected " + count_word(names.size()) + " integers " +
                 shape_text(names) + ", got '" + o.shape + "'");
  }
  b->chunk_size = o.chunk_size;  // 16, 32 or 64: checked by the option's validator
  if (Status s = parse_x_dtype(o.dtype, &b->x_dtype); !s.ok()) return s;
  if (Status s = parse_x_or_fp32("--beta-dtype", o.beta_dtype, b->x_dtype, &b->beta_dtype);
      !s.ok()) {
    return s;
  }
  if (!o.seqlens.empty()) {
    if (Status s = parse_int_list("--seqlens", o.seqlens, 0, &b->seqlens); !s.ok()) return s;
    int64_t total = 0;
    for (int64_t len : b->seqlens) total += len;
    if (b->dims[0] != 1 || b->dims[1] != total) {
      return usage("--seqlens: lengths sum to " + std::to_string(total) +
                   "; --shape must then be 1," + std::to_string(total) + "," +
                   shape_text(names, 2) + ", got '" + o.shape + "'");
    }
  } else if (o.pass_chunk_indices) {
    return usage("--chunk-indices: needs --seqlens (chunk_indices are for variable length)");
  }
  b->pass_chunk_indices = o.pass_chunk_indices;
  b->seed = o.seed;
  return Status::Ok();
}

Status parse_x_or_fp32(const std::string& option, const std::string& text, DType x_dtype,
                       DType* out) {
  if (text == "x" || text == "X") {
    *out = x_dtype;
  } else if (text == "fp32" || text == "float32") {
    *out = DType::f32;
  } else {
    return usage(option + ": expected x (the dtype X) or fp32, got '" + text + "'");
  }
  return Status::Ok();
}

Status check_host_memory(double need) {
  const MemoryBound bound = memory_bound();
  if (bound.room > 0 && need > 0.8 * bound.room) {
    char text[80];
    std::snprintf(text, sizeof text, "--shape: the problem needs %.1f GB of host memory, ",
                  need * 1e-9);
    return usage(text + bound.text);
  }
  return Status::Ok();
}

Status check_input_fits(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return Status::Ok();  // not a readable regular file: the reader says why
  const double need = 3.0 * static_cast<double>(size);
  const MemoryBound bound = memory_bound();
  if (bound.room > 0 && need > 0.8 * bound.room) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "--input: reading it needs about %.1f GB of host memory (three times the "
                  "file's %.1f GB), ",
                  need * 1e-9, static_cast<double>(size) * 1e-9);
    return usage(text + bound.text);
  }
  return Status::Ok();
}

}  // namespace kda::cli
