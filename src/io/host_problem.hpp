#pragma once
// Host-owned tensors for a whole problem of any operator, named by its argument table: built from
// a safetensors file or generated at random like the SPECs' examples. Used by the `kda` tool and
// the tests; not part of libkda's API. Each operator's own part (its outputs, options, file
// checks, random problems) lives in its folder (ops/<op>/host.cpp) and registers an OpIo.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kda/kda.hpp"

namespace kda::io {

struct HostTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // row-major

  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape);  // zero-filled
  int64_t numel() const;
  TensorView view(Device device = {}) const;  // contiguous view of bytes (data is non-const)
  double at(int64_t i) const;                 // element i (row-major) as double
  void set(int64_t i, double value);          // rounds to dtype
};

// A NaN-filled ("poisoned") tensor: every element an output must write.
HostTensor poisoned(DType dtype, std::vector<int64_t> shape);

// An option's value, of the type its table row gives it (KDA_TYPE_BOOL, _INT, _FLOAT_OR_NONE).
using OptionValue = std::variant<bool, int64_t, std::optional<double>>;

struct HostProblem {
  std::string op = ChunkBwdWyDqkgProblem::kName;  // whose argument table the names follow
  std::map<std::string, HostTensor> tensors;      // by table name: "q", ..., "out.dq"
  // Scalar options by table name ("chunk_size", ...); an absent one is the table's default.
  std::map<std::string, OptionValue> options;

  // Allocates the operator's outputs (shapes and dtypes from its inputs) filled with NaN.
  void allocate_outputs();
  // The operator's output names, in table order ("out.dq", ...).
  std::vector<std::string> output_names() const;
  // Views over every tensor present (outputs must be allocated) and the options, as operator
  // P's problem (P::kName must be `op`).
  template <typename P>
  P as() const;
  // Contiguous views of every tensor, by name.
  std::map<std::string, TensorView> views(Device device = {}) const;
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  const HostTensor& get(const std::string& name) const;
  HostTensor& get(const std::string& name);
};

// The options of `hp` into P's problem, by the names of P's option rows. Throws
// std::invalid_argument for a value of another type than its row's.
template <typename P>
void set_options(const HostProblem& hp, P* p) {
  for (const Option<P>& o : P::options()) {
    const auto it = hp.options.find(o.info.name);
    if (it == hp.options.end()) continue;
    const OptionValue& value = it->second;
    const bool typed = (o.as_bool && std::holds_alternative<bool>(value)) ||
                       (o.as_int && std::holds_alternative<int64_t>(value)) ||
                       (o.as_float && std::holds_alternative<std::optional<double>>(value));
    if (!typed) {
      throw std::invalid_argument(std::string("option '") + o.info.name +
                                  "': a value of another type than its table row's");
    }
    if (o.as_bool) p->*o.as_bool = std::get<bool>(value);
    if (o.as_int) p->*o.as_int = std::get<int64_t>(value);
    if (o.as_float) p->*o.as_float = std::get<std::optional<double>>(value);
  }
}

// An option of `hp` as P's problem holds it (the table's default when `hp` has none).
template <typename P, typename T>
T option_of(const HostProblem& hp, T P::*member) {
  P p;
  set_options(hp, &p);
  return p.*member;
}

// Operator P's problem over `views` (by argument-table name; absent names stay omitted) with
// the options of `options`: how a problem whose tensors live elsewhere (a GPU) is built.
template <typename P>
P problem_from_views(const std::map<std::string, TensorView>& views, const HostProblem& options) {
  P p;
  for (const Arg<P>& a : P::args()) {
    auto it = views.find(a.info.name);
    a.of(p) = it == views.end() ? TensorView{} : it->second;
  }
  set_options(options, &p);
  return p;
}

template <typename P>
P HostProblem::as() const {
  return problem_from_views<P>(views(), *this);
}

// What each operator registers for the generic file and command-line code.
struct OpIo {
  const char* name;                            // "chunk_bwd_wy_dqkg"
  const char* fla_name;                        // "chunk_kda_bwd_wy_dqkg_fused"
  const char* spec;                            // "SPEC.md"
  std::vector<std::string> (*input_names)();   // required and optional inputs, table order
  std::vector<std::string> (*output_names)();  // "out.dq", ...
  std::vector<std::string> (*required_inputs)();
  void (*allocate_outputs)(HostProblem* hp);
  // Before outputs are allocated from a file's inputs: the inputs they take their sizes from
  // agree, so a hostile file cannot make us allocate far more than it holds.
  Status (*check_output_sizes)(const HostProblem& hp);
  Status (*options_from_metadata)(const std::map<std::string, std::string>& metadata,
                                  HostProblem* hp);
  void (*options_to_metadata)(const HostProblem& hp, std::map<std::string, std::string>* out);
  Status (*validate)(const HostProblem& hp);
  // Runs on `views` (by name, wherever they live) with the options of `options`.
  Status (*run)(const std::map<std::string, TensorView>& views, const HostProblem& options,
                Backend backend, void* stream, Kernel kernel);
  // Bytes read and written at the operator's dtypes (the SPEC's floor formula).
  std::pair<int64_t, int64_t> (*bytes)(const HostProblem& hp);
  // SPEC's pass bar against the float64 reference, and the golden-file bar, for X.
  double (*pass_bar)(DType x_dtype);
  double (*golden_bar)(DType x_dtype);
};

// The operators, in KDA_OP_* order; find_op returns nullptr for an unknown name.
std::span<const OpIo* const> ops();
const OpIo* find_op(std::string_view name);
const OpIo& op_of(const HostProblem& hp);  // throws std::invalid_argument for an unknown op

// Table names of P's arguments by role.
template <typename P>
std::vector<std::string> arg_names(ArgRole role) {
  std::vector<std::string> names;
  for (const Arg<P>& a : P::args()) {
    if (a.info.role == role) names.emplace_back(a.info.name);
  }
  return names;
}

// rms(x - ref) / rms(ref) over the elements where ref is finite. Where ref is NaN or Inf, x must
// hold the same (both NaN, or the same infinity): those elements are left out. NaN when x and ref
// disagree on an element's finiteness (or in element count), so that no bar passes.
double err_ratio(const HostTensor& x, const HostTensor& ref);

// ---- chunk_bwd_wy_dqkg's random problems (ops/chunk_bwd_wy_dqkg/host.cpp) ---------------------

struct WyDqkgConfig {
  int64_t B = 1, T = 2048, H = 32, HV = 0 /* 0: = H */, K = 128, V = 128, BT = 64;
  DType x_dtype = DType::bf16;
  DType h_dtype = DType::f32;
  DType beta_dtype = DType::f32;  // set equal to x_dtype for "beta in X"
  std::vector<int64_t> seqlens;   // non-empty: varlen, B must be 1 and T = sum
  bool pass_chunk_indices = false;
  bool state_v_first = false;
  std::optional<double> scale;
  uint64_t seed = 0;
};

// Inputs drawn like the golden files: q k v v_new do dv h dh ~ N(0, 1); A ~ N(0, 0.1) (full, as
// stored); g ~ -U(0.05, 2.5) (log2 space); beta ~ U(0.05, 0.95). Outputs allocated and poisoned.
HostProblem make_random_problem(const WyDqkgConfig& config);
// The same, with a check of the allocated problem (inputs still zero) before the values are
// drawn: a problem the library will refuse is refused in a moment, not after filling gigabytes.
Status make_random_problem(const WyDqkgConfig& config,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out);

// chunk_bwd_wy_dqkg's SPEC pass bar against the float64 reference, and its golden-file bar.
double pass_bar(DType x_dtype);
double golden_bar(DType x_dtype);

// ---- chunk_bwd_intra's random problems (ops/chunk_bwd_intra/host.cpp) ------------------------

struct IntraConfig {
  int64_t B = 1, T = 2048, H = 32, HV = 0 /* 0: = H */, K = 128, BT = 64;
  DType x_dtype = DType::bf16;
  DType beta_dtype = DType::f32;  // f32, or x_dtype for "beta in X"
  std::vector<int64_t> seqlens;   // non-empty: varlen, B must be 1 and T = sum
  bool pass_chunk_indices = false;
  bool safe_gate = false;
  // Per-token natural-log decays: channel c of value head hv is "strong" when (hv + c) %
  // strong_every == 1 % strong_every (4: every fourth channel; 1: all; 0: none), drawing from
  // [-5, -4.6] (within-chunk log2 cumsums down to about -460 at BT = 64); the others draw
  // log-uniformly from [-1, -0.001].
  int64_t strong_every = 4;
  DType index_dtype = DType::i64;  // of cu_seqlens and chunk_indices
  uint64_t seed = 0;
};

// Inputs as SPEC-chunk-bwd-intra.md's measurements: q, k with unit-norm rows; g the chunk-local
// cumsum (restarting at every chunk, varlen-aware) of the log2 decays above; beta ~ U(0.05, 0.95);
// dAqk, dAkk ~ N(0, 1) where read (j <= i inside the chunk, the dAkk diagonal included) and
// garbage (NaN, +-Inf, 100.0) in every entry the operator must not read; incoming dq, dk, db ~
// N(0, 0.1), dg ~ N(0, 0.02). Outputs allocated and poisoned.
HostProblem make_random_problem(const IntraConfig& config);
Status make_random_problem(const IntraConfig& config,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out);

// chunk_bwd_intra's bars (SPEC-chunk-bwd-intra.md).
double intra_pass_bar(DType x_dtype);
double intra_golden_bar(DType x_dtype);

// ---- chunk_bwd_epilogue's random problems (ops/chunk_bwd_epilogue/host.cpp) -----------------

struct EpilogueConfig {
  int64_t B = 1, T = 2048, H = 32, HV = 0 /* 0: = H */, K = 128, V = 128, BT = 64;
  DType x_dtype = DType::bf16;
  DType h_dtype = DType::f32;
  DType beta_dtype = DType::f32;  // f32, or x_dtype for "beta in X"
  std::vector<int64_t> seqlens;   // non-empty: varlen, B must be 1 and T = sum
  bool pass_chunk_indices = false;
  bool state_v_first = false;
  std::optional<double> scale;
  bool l2norm = true;         // use_qk_l2norm_in_kernel
  std::string gate = "none";  // "none" (g: log decays), "softplus" or "lower_bound" (-5)
  bool beta_sigmoid = false;  // use_beta_sigmoid_in_kernel
  bool allow_neg_eigval = false;
  std::vector<double> A_log;  // with the gate in the kernel: A_log of value head i is
                              // A_log[i % size]; empty: drawn U(0, 2)
  uint64_t seed = 0;
};

// Inputs: q, k, v, v_new, dv, do, h, dh ~ N(0, 1); A ~ N(0, 0.1) as stored (full BT columns);
// g: per-token natural-log decays -U(0.001, 1) log-uniformly, or with the gate in the kernel its
// raw input N(0, 1) with A_log ~ U(0, 2), dt_bias ~ N(0, 0.5); beta ~ U(0.05, 0.95), or N(0, 1)
// logits with the sigmoid. Outputs allocated and poisoned.
HostProblem make_random_problem(const EpilogueConfig& config);
Status make_random_problem(const EpilogueConfig& config,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out);

// ---- chunk_bwd_prep's random problems (ops/chunk_bwd_prep/host.cpp) -------------------------

struct PrepConfig {
  int64_t B = 1, T = 2048, H = 32, HV = 0 /* 0: = H */, K = 128, V = 128, BT = 64;
  DType x_dtype = DType::bf16;
  DType beta_dtype = DType::f32;  // f32, or x_dtype for "beta in X"
  std::vector<int64_t> seqlens;   // non-empty: varlen, B must be 1 and T = sum
  bool pass_chunk_indices = false;
  bool l2norm = true;         // use_qk_l2norm_in_kernel
  std::string gate = "none";  // "none" (g: log decays), "softplus" or "lower_bound" (-5)
  bool beta_sigmoid = false;  // use_beta_sigmoid_in_kernel
  bool allow_neg_eigval = false;
  std::vector<double> A_log;  // with the gate in the kernel: A_log of value head i is
                              // A_log[i % size]; empty: drawn U(0, 2)
  uint64_t seed = 0;
};

// Inputs: q, k, v, do ~ N(0, 1); A and Aqk ~ N(0, 0.1) in every column (full BT columns, the
// entries the operator does not read included), A's diagonal 1; g, beta, A_log and dt_bias as
// EpilogueConfig's. Outputs allocated and poisoned.
HostProblem make_random_problem(const PrepConfig& config);
Status make_random_problem(const PrepConfig& config,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out);

// ---- chunk_bwd_dhu's random problems (ops/chunk_bwd_dhu/host.cpp) ----------------------------

struct DhuConfig {
  int64_t B = 1, T = 2048, H = 32, HV = 0 /* 0: = H */, K = 128, V = 128, BT = 64;
  DType x_dtype = DType::bf16;
  DType state_dtype = DType::f32;  // h0, dht: float32, or x_dtype
  std::vector<int64_t> seqlens;    // non-empty: varlen, B must be 1 and T = sum
  bool pass_chunk_indices = false;
  DType index_dtype = DType::i64;  // of cu_seqlens and chunk_indices
  bool state_v_first = false;
  std::optional<double> scale;
  bool use_g = false;    // the per-head gate g
  bool use_gk = true;    // the per-channel gate gk
  bool with_h0 = true;   // h0 given (dh0's shape only)
  bool with_dht = true;  // dht given (else the scan starts from 0)
  uint64_t seed = 0;
};

// Inputs: q, do, dv ~ N(0, 1); k rows N(0, 1) / sqrt(K) (about unit norm, like normalised keys)
// and w rows N(0, 1) / sqrt(K BT), so that the scan's map D -> (decay - wᵀk) D stays near a
// contraction for any K and BT (wᵀk over a chunk of unit rows has a spectral radius of about
// sqrt(BT / K): 1.8 at K = 20, BT = 64, a growth of the state by that every chunk; with w
// scaled down it is about 1 / sqrt(K)); gk, g the chunk-local
// cumsums (restarting at every chunk, varlen-aware) of per-token log2 decays ln(a) / ln 2 with
// ln(a) drawn log-uniformly from [-1, -0.001] (the other operators' decays), g per value head;
// h0, dht ~ N(0, 1). Outputs allocated and poisoned.
HostProblem make_random_problem(const DhuConfig& config);
Status make_random_problem(const DhuConfig& config,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out);

// ---- chunk_fwd_h's random problems (ops/chunk_fwd_h/host.cpp) ---------------------------------

struct FwdHConfig {
  int64_t B = 1, T = 2048, H = 32, HV = 0 /* 0: = H */, K = 128, V = 128, BT = 64;
  DType x_dtype = DType::bf16;
  DType state_dtype = DType::f32;  // initial_state: float32, or x_dtype
  std::vector<int64_t> seqlens;    // non-empty: varlen, B must be 1 and T = sum
  bool pass_chunk_indices = false;
  DType index_dtype = DType::i64;  // of cu_seqlens and chunk_indices
  bool state_v_first = false;
  bool use_g = false;               // the per-head gate g
  bool use_gk = true;               // the per-channel gate gk
  bool with_initial_state = true;   // initial_state given (else the scan starts from 0)
  bool output_final_state = false;  // fla's switches: options of the problem, no effect
  bool save_new_value = true;
  uint64_t seed = 0;
};

// Inputs: u ~ N(0, 1); k rows N(0, 1) / sqrt(K) (about unit norm, like normalised keys) and w
// rows N(0, 1) / sqrt(K BT), so that the scan's map S -> (decay - kᵀw) S stays near a
// contraction for any K and BT (as DhuConfig's problems, whose map is the transpose); g, gk the
// chunk-local cumsums (restarting at every chunk, varlen-aware) of per-token log2 decays
// ln(a) / ln 2 with ln(a) drawn log-uniformly from [-1, -0.001], g per value head;
// initial_state ~ N(0, 1). Outputs allocated and poisoned.
HostProblem make_random_problem(const FwdHConfig& config);
Status make_random_problem(const FwdHConfig& config,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out);

}  // namespace kda::io
