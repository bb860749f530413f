#pragma once
// An operator's own part of `kda run`: one file per operator, ops/<op>.cpp defining
// make_<op>_cli(), one per operator of KDA_OPS (kda/ops.h). It declares the options of
// the operator's generated problems, builds one from --shape, and summarizes a problem for the
// printout. Everything else (files, the checks, the timing, the backends) is generic and goes
// through the operator's io::OpIo.

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/host_problem.hpp"
#include "io/layer_random.hpp"
#include "kda/status.hpp"
#include "options.hpp"

namespace kda::cli {

// Run on a generated problem once its tensors are allocated, before their values are drawn: a
// problem the library will refuse is refused in a moment, not after filling gigabytes.
using CheckBeforeFilling = std::function<Status(const io::HostProblem&)>;

// What the generic code needs of a valid problem, and what it prints about it.
struct ProblemSummary {
  int64_t B = 0;   // batch rows (1 when varlen)
  int64_t T = 0;   // tokens per batch row
  int64_t HV = 0;  // heads of the outputs (value heads)
  int64_t BT = 0;  // chunk size
  int64_t NT = 0;  // chunks: per batch row (fixed length) or in total (varlen)
  int64_t num_seqs = 0;
  bool varlen = false;
  DType x_dtype = DType::f32;  // picks the operator's bars
  std::string sizes;           // "B=1 T=100 H=3 HV=3 K=32 V=48 BT=16 NT=7"
  // Further lines as (label, text): ("dtypes", "X=bfloat16 ..."), ("scale", "0.125").
  std::vector<std::pair<std::string, std::string>> details;
};

// --scale's value into `scale` (empty text: None, K ** -0.5); a usage error naming the option.
inline Status parse_scale(const std::string& text, std::optional<double>* scale) {
  if (text.empty()) return Status::Ok();
  double value = 0.0;
  if (!parse_whole(text, &value) || !std::isfinite(value)) {
    return invalid_argument("--scale: expected a finite number, got '" + text + "'");
  }
  *scale = value;
  return Status::Ok();
}

// The options of the operators with per-chunk states (chunk_bwd_wy_dqkg, chunk_bwd_epilogue):
// --h-dtype, --scale, --state-v-first, and their values in an io config.
struct StateOptions {
  std::string h_dtype = "fp32";
  std::string scale;  // empty: None (K ** -0.5)
  bool state_v_first = false;

  template <typename Generated>
  void add(CLI::App* command, const Generated& generated) {
    generated(command->add_option("--h-dtype", h_dtype, "h, dh: fp32 or x (the dtype X)")
                  ->capture_default_str());
    generated(command->add_option("--scale", scale, "scale (default: K ** -0.5)"));
    generated(command->add_flag("--state-v-first", state_v_first, "h, dh stored [.., V, K]"));
  }

  // Into config (x_dtype already set); an invalid argument names the option.
  template <typename Config>
  Status apply(Config* c) const {
    if (Status s = parse_x_or_fp32("--h-dtype", h_dtype, c->x_dtype, &c->h_dtype); !s.ok()) {
      return s;
    }
    c->state_v_first = state_v_first;
    return parse_scale(scale, &c->scale);
  }
};

// The options of the operators that apply a KDA layer's activations (chunk_bwd_epilogue,
// chunk_bwd_prep): --no-l2norm, --gate, --beta-sigmoid, --allow-neg-eigval, their values in an
// io config, and the summary's "layer" line.
struct LayerActivationOptions {
  bool no_l2norm = false;
  std::string gate = "none";
  bool beta_sigmoid = false;
  bool allow_neg_eigval = false;

  template <typename Generated>
  void add(CLI::App* command, const Generated& generated) {
    generated(command->add_flag("--no-l2norm", no_l2norm, "q, k not l2-normalised in the layer"));
    generated(command
                  ->add_option("--gate", gate,
                               "none (g: log decays), softplus or lower_bound (-5): the gate in "
                               "the kernel")
                  ->capture_default_str());
    generated(command->add_flag("--beta-sigmoid", beta_sigmoid, "beta holds logits"));
    generated(command->add_flag("--allow-neg-eigval", allow_neg_eigval,
                                "with --beta-sigmoid: 2 sigmoid(beta)"));
  }

  // Into config; an invalid argument names the option.
  template <typename Config>
  Status apply(Config* c) const {
    if (!io::is_layer_gate_name(gate)) {
      return invalid_argument("--gate: expected none, softplus or lower_bound, got '" + gate + "'");
    }
    c->l2norm = !no_l2norm;
    c->gate = gate;
    c->beta_sigmoid = beta_sigmoid;
    c->allow_neg_eigval = allow_neg_eigval;
    return Status::Ok();
  }

  // The problem's switches as the summary prints them.
  template <typename Problem>
  static std::pair<std::string, std::string> summary_line(const Problem& p) {
    const auto yes = [](bool on) { return on ? "true" : "false"; };
    return {"layer", std::string("l2norm=") + yes(p.use_qk_l2norm_in_kernel) +
                         " gate_in_kernel=" + yes(p.use_gate_in_kernel) +
                         " beta_sigmoid=" + yes(p.use_beta_sigmoid_in_kernel) +
                         " allow_neg_eigval=" + yes(p.allow_neg_eigval)};
  }
};

// Bytes of h and dh of a generated problem of an operator with states (one state per chunk, at
// most one short chunk per sequence), in double so absurd shapes cannot overflow.
template <typename Config>
double state_bytes(const Config& c) {
  const double chunks =
      static_cast<double>(c.B) * std::ceil(static_cast<double>(c.T) / static_cast<double>(c.BT)) +
      static_cast<double>(c.seqlens.size());
  const double HV = static_cast<double>(c.HV ? c.HV : c.H);
  return chunks * 2 * HV * static_cast<double>(c.K) * static_cast<double>(c.V) *
         static_cast<double>(dtype_size(c.h_dtype));
}

// The sizes line of a validated problem of an operator with states: "B=.. T=.. H=.. HV=.. K=..
// V=.. BT=.. NT=..".
template <typename Dims>
std::string state_problem_sizes(const Dims& d) {
  return "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " H=" + std::to_string(d.H) +
         " HV=" + std::to_string(d.HV) + " K=" + std::to_string(d.K) + " V=" + std::to_string(d.V) +
         " BT=" + std::to_string(d.BT) + " NT=" + std::to_string(d.NT);
}

// The generic options of a generated problem into an operator's io config (the operators'
// configs name these fields alike): B, T, H, K from --shape, HV (0: = H), the chunk size, dtypes
// (beta's where the operator has a beta), varlen and seed.
template <typename Config>
void set_generated_basics(const GeneratedBasics& b, int64_t heads_v, Config* c) {
  c->B = b.dims[0];
  c->T = b.dims[1];
  c->H = b.dims[2];
  c->K = b.dims[3];
  c->HV = heads_v;
  c->BT = b.chunk_size;
  c->x_dtype = b.x_dtype;
  if constexpr (requires { c->beta_dtype; }) c->beta_dtype = b.beta_dtype;
  c->seqlens = b.seqlens;
  c->pass_chunk_indices = b.pass_chunk_indices;
  c->seed = b.seed;
}

// A fresh summary with the fields every operator's validated dims share (B, T, HV, BT, NT, the
// sequences, X's dtype); the operator adds its sizes text and details.
template <typename Dims>
ProblemSummary summary_of_dims(const Dims& d) {
  ProblemSummary s;
  s.B = d.B;
  s.T = d.T;
  s.HV = d.HV;
  s.BT = d.BT;
  s.NT = d.NT;
  s.num_seqs = d.num_seqs;
  s.varlen = d.varlen;
  s.x_dtype = d.x_dtype;
  return s;
}

class OpCli {
 public:
  virtual ~OpCli() = default;
  // The sizes --shape takes, in order (they start with B, T): {"B", "T", "H", "K", "V"}.
  virtual std::span<const char* const> shape_names() const = 0;
  // A --shape for the help: "1,2048,32,128,128".
  virtual const char* shape_example() const = 0;
  // Declares the operator's own options on its subcommand. Each describes a generated problem,
  // so each goes through `generated` (which makes --input exclude it).
  virtual void add_options(CLI::App* command, const GeneratedOption& generated) = 0;
  // Builds a random problem from the generic options (`basics`, --shape parsed by shape_names())
  // and the operator's own: io::make_random_problem with `check` run before the values are drawn.
  // Usage errors name the option; std::invalid_argument from the generator is reported as a
  // --seqlens error.
  virtual Status generate(const GeneratedBasics& basics, const CheckBeforeFilling& check,
                          io::HostProblem* out) const = 0;
  // Validates `problem` (outputs allocated) and summarizes it.
  virtual Status summarize(const io::HostProblem& problem, ProblemSummary* out) const = 0;
  // Inputs whose dimension 1 counts chunks in global order (chunk_bwd_wy_dqkg's h, dh) rather
  // than tokens. The reference check of a large problem runs cpu-ref on a sample of chunks made
  // into a varlen batch: it gathers these by chunk and every other input (but cu_seqlens and
  // chunk_indices) by token rows, which holds for an operator whose outputs for a chunk read only
  // that chunk's rows and states.
  virtual std::vector<std::string> chunk_inputs() const { return {}; }
  // False for an operator whose outputs for a chunk depend on other chunks (a state scan:
  // chunk_bwd_dhu, chunk_fwd_h): the reference check then recomputes the whole problem, never a
  // sample.
  virtual bool chunks_are_independent() const { return true; }
};

struct OpCliEntry {
  const char* name;  // the operator's io::OpIo name
  std::unique_ptr<OpCli> (*make)();
};

// The operators' parts, in KDA_OPS order (ops/registry.cpp); find_op_cli returns nullptr for an
// unknown name.
std::span<const OpCliEntry> op_clis();
const OpCliEntry* find_op_cli(std::string_view name);

}  // namespace kda::cli
