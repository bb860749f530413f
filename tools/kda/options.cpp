#include "options.hpp"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <vector>

namespace kda::cli {

namespace {

Status usage(const std::string& message) {
  return invalid_argument(message);
}

// The whole of `text` as a T: no leading space or '+', nothing after the number, in T's range (so
// no sign for an unsigned T).
template <typename T>
bool parse_whole(std::string_view text, T* value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size();
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

// --h-dtype and --beta-dtype: "fp32", or "x" for the dtype of q (X).
Status parse_x_or_fp32(const std::string& option, const std::string& text, DType x_dtype,
                       DType* out) {
  if (text == "x" || text == "X") {
    *out = x_dtype;
  } else if (text == "fp32" || text == "float32") {
    *out = DType::f32;
  } else {
    return usage(option + ": expected x (the dtype of q) or fp32, got '" + text + "'");
  }
  return Status::Ok();
}

// Bytes of every input and output, in double so absurd shapes cannot overflow.
double problem_bytes(const io::ProblemConfig& c) {
  const double HV = static_cast<double>(c.HV ? c.HV : c.H);
  const double BT = static_cast<double>(c.BT);
  const double rows = static_cast<double>(c.B) * static_cast<double>(c.T);  // tokens
  const double H = static_cast<double>(c.H), K = static_cast<double>(c.K);
  const double V = static_cast<double>(c.V);
  const double chunks = static_cast<double>(c.B) * std::ceil(static_cast<double>(c.T) / BT) +
                        static_cast<double>(c.seqlens.size());
  const auto x = static_cast<double>(dtype_size(c.x_dtype));
  const auto hs = static_cast<double>(dtype_size(c.h_dtype));
  const auto bs = static_cast<double>(dtype_size(c.beta_dtype));
  return rows * (2 * H * K * x            // q, k
                 + 5 * HV * V * x         // v, v_new, do, dv, dv_out
                 + 4 * HV * K * 4         // g, dq, dk, dg
                 + HV * (bs + 4)          // beta, db
                 + HV * BT * (x + 4))     // A, dA
         + chunks * 2 * HV * K * V * hs;  // h, dh
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size)
                                    : 0.0;
}

}  // namespace

void add_run_options(CLI::App* run, RunOptions* o) {
  CLI::Option* input = run->add_option("-i,--input", o->input,
                                       "safetensors file with inputs by SPEC name (like "
                                       "shared/golden); its out.* tensors, if any, are the "
                                       "expected outputs");
  CLI::Option* shape = run->add_option(
      "-s,--shape", o->shape, "generate inputs of shape B,T,H,K,V (e.g. 1,2048,32,128,128)");
  input->excludes(shape);
  // Options that only describe a generated problem.
  const auto shape_only = [&](CLI::Option* opt) { opt->excludes(input); };
  // 0 stands for "not given" (HV = H) in RunOptions, so a given value must be positive.
  const CLI::Validator positive(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        if (!parse_whole(text, &value) || value < 1) {
          return "expected a positive number of value heads, got '" + text + "'";
        }
        return "";
      },
      "POSITIVE");
  shape_only(
      run->add_option("--heads-v", o->heads_v, "value heads HV (default: H)")->check(positive));
  shape_only(run->add_option("--chunk-size", o->chunk_size, "chunk size BT: 16, 32 or 64")
                 ->capture_default_str());
  shape_only(run->add_option("--dtype", o->dtype, "X: bf16, fp16 or fp32")->capture_default_str());
  shape_only(run->add_option("--h-dtype", o->h_dtype, "h, dh: fp32 or x (the dtype X)")
                 ->capture_default_str());
  shape_only(run->add_option("--beta-dtype", o->beta_dtype, "beta: x (the dtype X) or fp32")
                 ->capture_default_str());
  shape_only(run->add_option("--seqlens", o->seqlens,
                             "variable length: sequence lengths L1,L2,... (B must be 1 and T "
                             "their sum)"));
  shape_only(run->add_option("--scale", o->scale, "scale (default: K ** -0.5)"));
  shape_only(run->add_flag("--state-v-first", o->state_v_first, "h, dh stored [.., V, K]"));
  shape_only(run->add_flag("--chunk-indices", o->pass_chunk_indices,
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
  shape_only(run->add_option("--seed", o->seed, "random seed for the inputs")
                 ->check(whole_uint64)
                 ->capture_default_str());

  run->add_option("-o,--output", o->output, "write inputs and the six outputs (out.*) here");
  run->add_option("-b,--backend", o->backend,
                  "cpu-ref, cpu or cuda (default: cuda when available, else cpu)");
  run->add_option("--repeat", o->repeat,
                  "timed runs after one warm-up (default: cuda 20, cpu 3, cpu-ref 1)")
      ->check(CLI::Range(1, 100000));
  run->add_flag("--check", o->check,
                "exit 1 when an output's err_ratio is above its bar (SPEC pass bar against "
                "cpu-ref, golden bar against the file's out.* tensors)");
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

Status make_problem_config(const RunOptions& o, io::ProblemConfig* c) {
  std::vector<int64_t> dims;
  if (Status s = parse_int_list("--shape", o.shape, 1, &dims); !s.ok()) return s;
  if (dims.size() != 5) {
    return usage("--shape: expected five integers B,T,H,K,V, got '" + o.shape + "'");
  }
  c->B = dims[0];
  c->T = dims[1];
  c->H = dims[2];
  c->K = dims[3];
  c->V = dims[4];
  if (o.heads_v < 0) return usage("--heads-v: expected a positive number of value heads");
  c->HV = o.heads_v;
  // Generation divides by the chunk size; validate() later names the allowed values.
  if (o.chunk_size < 1) return usage("--chunk-size: expected 16, 32 or 64");
  c->BT = o.chunk_size;
  if (Status s = parse_x_dtype(o.dtype, &c->x_dtype); !s.ok()) return s;
  if (Status s = parse_x_or_fp32("--h-dtype", o.h_dtype, c->x_dtype, &c->h_dtype); !s.ok()) {
    return s;
  }
  if (Status s = parse_x_or_fp32("--beta-dtype", o.beta_dtype, c->x_dtype, &c->beta_dtype);
      !s.ok()) {
    return s;
  }
  if (!o.seqlens.empty()) {
    if (Status s = parse_int_list("--seqlens", o.seqlens, 0, &c->seqlens); !s.ok()) return s;
    int64_t total = 0;
    for (int64_t len : c->seqlens) total += len;
    if (c->B != 1 || c->T != total) {
      return usage("--seqlens: lengths sum to " + std::to_string(total) +
                   "; --shape must then be 1," + std::to_string(total) + ",H,K,V, got '" + o.shape +
                   "'");
    }
  } else if (o.pass_chunk_indices) {
    return usage("--chunk-indices: needs --seqlens (chunk_indices are for variable length)");
  }
  c->pass_chunk_indices = o.pass_chunk_indices;
  c->state_v_first = o.state_v_first;
  if (!o.scale.empty()) {
    double value = 0.0;
    if (!parse_whole(o.scale, &value) || !std::isfinite(value)) {
      return usage("--scale: expected a finite number, got '" + o.scale + "'");
    }
    c->scale = value;
  }
  c->seed = o.seed;
  // Refuse up front what cannot fit, rather than fail (or be killed) halfway through filling it.
  const double need = problem_bytes(*c), have = physical_memory_bytes();
  if (have > 0 && need > 0.8 * have) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "--shape: the problem needs %.1f GB of host memory, this machine has %.1f GB",
                  need * 1e-9, have * 1e-9);
    return usage(text);
  }
  return Status::Ok();
}

Status check_input_fits(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return Status::Ok();  // not a readable regular file: the reader says why
  const double need = 3.0 * static_cast<double>(size), have = physical_memory_bytes();
  if (have > 0 && need > 0.8 * have) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "--input: reading it needs about %.1f GB of host memory (three times the "
                  "file's %.1f GB), this machine has %.1f GB",
                  need * 1e-9, static_cast<double>(size) * 1e-9, have * 1e-9);
    return usage(text);
  }
  return Status::Ok();
}

}  // namespace kda::cli
