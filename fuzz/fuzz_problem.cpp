// fuzz_problem: every operator's validation and CPU backends through both faces of the library.
// The first input byte picks the operator (its value modulo the number of operators, in the order
// of kOperators below: 0 chunk_bwd_wy_dqkg, 1 chunk_bwd_intra, 2 chunk_bwd_epilogue,
// 3 chunk_bwd_prep; an empty input is chunk_bwd_wy_dqkg's); the rest decodes into that operator's
// problem descriptor (small
// B, T, H, HV, K, BT, dtypes, strides, cu_seqlens, chunk_indices, and the operator's own sizes and
// options: V, state_v_first, scale; safe_gate; the layer's activation switches, A_log and
// dt_bias), sometimes broken on purpose (shapes, ranks, dtypes,
// strides, devices, missing or null or misaligned or aliased tensors), and checks what the library
// promises:
//   - validate() and the C face's kda_<op>_validate() never crash and agree; they reject every
//     problem the harness knows to be invalid and accept every problem it knows to be valid;
//   - a rejected problem is rejected by run() with the same message and no buffer changes;
//   - an accepted problem runs on cpu-ref and cpu without a sanitizer finding, writes every
//     output element, leaves every input byte as it was, gives finite outputs for finite,
//     moderate inputs, and the two backends agree.
// Every host tensor gets a buffer of exactly the bytes its view spans, so AddressSanitizer
// reports any read or write past what the view claims. Views the harness cannot or must not back
// with memory (on "cuda", or spanning more than kMaxSpanBytes) point into a PROT_NONE region:
// touching one is a segmentation fault, which libFuzzer reports.

#include <fuzzer/FuzzedDataProvider.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "c_abi_view.hpp"
#include "core/element.hpp"
#include "fuzz_common.hpp"
#include "kda/kda.h"
#include "kda/kda.hpp"

namespace {

using kda::DType;
using kda::TensorView;

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
// Larger views are never backed by memory (see the header comment).
constexpr int64_t kMaxSpanBytes = int64_t{1} << 22;

// The views of an operator's Problem, from its argument table (its C problem struct's order).
template <typename Problem>
struct Slot {
  const char* name;
  TensorView Problem::*member;
  bool is_output;
  bool is_index;     // cu_seqlens, chunk_indices
  bool is_optional;  // may be omitted (index tensors, A_log and dt_bias)
};
#define KDA_FUZZ_SLOT(member, name, role, type, rank, rule, doc)                                  \
  KDA_WHEN_TENSOR_##role({name, &Problem::member, role == KDA_ARG_OUTPUT, type == KDA_TYPE_INDEX, \
                          role == KDA_ARG_OPTIONAL}, )

constexpr bool same_name(const char* a, const char* b) {
  return std::string_view(a) == std::string_view(b);
}
// The index of the slot called `name` in `slots` (every name the harness asks for exists).
template <typename Problem, size_t N>
constexpr int slot_named(const Slot<Problem> (&slots)[N], const char* name) {
  for (size_t s = 0; s < N; ++s) {
    if (same_name(slots[s].name, name)) return static_cast<int>(s);
  }
  return -1;
}

// A PROT_NONE reservation for views that must never be dereferenced on the host.
uint8_t* forbidden_region() {
  static uint8_t* region = [] {
    void* p = mmap(nullptr, size_t{1} << 32, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    KDA_FUZZ_CHECK(p != MAP_FAILED, "cannot reserve the PROT_NONE region");
    return static_cast<uint8_t*>(p);
  }();
  return region;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double uniform(uint64_t& state, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
}

bool known_dtype(DType d) {
  return static_cast<int32_t>(d) >= 0 && static_cast<int32_t>(d) <= 5;
}

// Bytes spanned by a view (0 when it has no element), or nullopt when the harness cannot back
// it: an unknown dtype or rank, a negative extent or stride, or arithmetic past int64.
std::optional<int64_t> span_bytes(const TensorView& t) {
  if (!known_dtype(t.dtype) || t.rank < 0 || t.rank > kda::kMaxRank) return std::nullopt;
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0) return std::nullopt;
    if (t.shape[d] == 0) return 0;
  }
  for (int d = 0; d < t.rank; ++d) {
    int64_t term = 0;
    if (__builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &term) ||
        __builtin_add_overflow(last, term, &last)) {
      return std::nullopt;
    }
  }
  int64_t bytes = 0;
  if (__builtin_add_overflow(last, 1, &last) ||
      __builtin_mul_overflow(last, static_cast<int64_t>(kda::dtype_size(t.dtype)), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

// The library's rule, restated: extents other than 1 have row-major strides, and a view with no
// elements is contiguous whatever its strides. A rank outside 0..kMaxRank (a garbage enum the
// judge rejects separately) is not contiguous either; the check must not index past the view's
// arrays (found by fuzz_problem on 2026-11-30).
bool harness_contiguous(const TensorView& t) {
  if (t.rank < 0 || t.rank > kda::kMaxRank) return false;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return true;
  }
  int64_t expected = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    if (__builtin_mul_overflow(expected, t.shape[d], &expected)) return false;
  }
  return true;
}

// --- the problem the input describes ---------------------------------------------------------

// What the input asks for, before any deliberate break: the sizes and options of any operator
// (V, h_dtype, state_v_first and scale are chunk_bwd_wy_dqkg's and chunk_bwd_epilogue's,
// safe_gate chunk_bwd_intra's, the layer's switches and g_dtype chunk_bwd_epilogue's; the others
// leave them at their defaults).
struct Plan {
  int64_t B = 0, T = 0, H = 1, HV = 1, K = 1, V = 1, BT = 16, NT = 0;
  DType x = DType::f32, h_dtype = DType::f32, beta_dtype = DType::f32, g_dtype = DType::f32;
  DType cu_dtype = DType::i64, ci_dtype = DType::i64;
  bool varlen = false, pass_chunk_indices = false, state_v_first = false, safe_gate = false;
  bool l2norm = false, gate_in_kernel = false, beta_sigmoid = false, allow_neg_eigval = false;
  bool has_A_log = false, has_dt_bias = false;
  std::vector<int64_t> cu;             // intended cu_seqlens
  std::vector<int64_t> chunk_indices;  // intended, flattened (seq, chunk) pairs
  std::optional<double> scale, lower_bound;
};

constexpr int64_t kHeadDims[] = {1, 2, 3, 4, 5, 8, 16};
constexpr DType kXDtypes[] = {DType::f32, DType::bf16, DType::f16};

// The chunks, last: fixed length (B, T) or varlen (cu_seqlens, chunk_indices and their dtypes).
void decode_chunks(FuzzedDataProvider& fdp, Plan& p) {
  p.varlen = fdp.ConsumeBool();
  if (!p.varlen) {
    p.B = fdp.ConsumeIntegralInRange<int64_t>(0, 2);
    p.T = fdp.ConsumeIntegralInRange<int64_t>(0, 40);
    p.NT = (p.T + p.BT - 1) / p.BT;
    return;
  }
  p.B = 1;
  p.cu_dtype = fdp.ConsumeBool() ? DType::i32 : DType::i64;
  p.ci_dtype = fdp.ConsumeBool() ? DType::i32 : DType::i64;
  p.pass_chunk_indices = fdp.ConsumeBool();
  const int64_t num_seqs = fdp.ConsumeIntegralInRange<int64_t>(0, 3);
  p.cu.push_back(0);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t len = fdp.ConsumeIntegralInRange<int64_t>(0, 24);
    for (int64_t c = 0; c < (len + p.BT - 1) / p.BT; ++c) {
      p.chunk_indices.push_back(s);
      p.chunk_indices.push_back(c);
    }
    p.cu.push_back(p.cu.back() + len);
  }
  p.T = p.cu.back();
  p.NT = static_cast<int64_t>(p.chunk_indices.size() / 2);
}

// The WY operator's sizes and options (chunk_bwd_epilogue's too), before the chunks.
Plan decode_wy_plan_sizes(FuzzedDataProvider& fdp) {
  Plan p;
  p.H = fdp.ConsumeIntegralInRange<int64_t>(1, 2);
  p.HV = p.H * fdp.ConsumeIntegralInRange<int64_t>(1, 3);
  p.K = fdp.PickValueInArray(kHeadDims);
  p.V = fdp.PickValueInArray(kHeadDims);
  p.BT = fdp.PickValueInArray({int64_t{16}, int64_t{32}, int64_t{64}});
  p.x = fdp.PickValueInArray(kXDtypes);
  p.h_dtype = fdp.ConsumeBool() ? p.x : DType::f32;
  p.beta_dtype = fdp.ConsumeBool() ? p.x : DType::f32;
  p.state_v_first = fdp.ConsumeBool();
  switch (fdp.ConsumeIntegralInRange(0, 3)) {
    case 0:
      break;  // None: K ** -0.5
    case 1:
      p.scale = fdp.PickValueInArray({0.0, 1.0, -0.5, 0.125, 3.0, 16.0});
      break;
    case 2:
      // Extreme but valid: float32's largest, subnormal and below-subnormal magnitudes.
      p.scale = fdp.PickValueInArray({3.4028234663852886e38, -1e-300, 65504.0, 1e-45});
      break;
    default:
      p.scale = fdp.ConsumeFloatingPointInRange(-16.0, 16.0);
      break;
  }
  return p;
}

Plan decode_wy_plan(FuzzedDataProvider& fdp) {
  Plan p = decode_wy_plan_sizes(fdp);
  decode_chunks(fdp, p);
  return p;
}

Plan decode_intra_plan(FuzzedDataProvider& fdp) {
  Plan p;
  p.H = fdp.ConsumeIntegralInRange<int64_t>(1, 2);
  p.HV = p.H * fdp.ConsumeIntegralInRange<int64_t>(1, 3);
  p.K = fdp.PickValueInArray(kHeadDims);
  p.BT = fdp.PickValueInArray({int64_t{16}, int64_t{32}, int64_t{64}});
  p.x = fdp.PickValueInArray(kXDtypes);
  p.beta_dtype = fdp.ConsumeBool() ? p.x : DType::f32;
  p.safe_gate = fdp.ConsumeBool();
  decode_chunks(fdp, p);
  return p;
}

// chunk_bwd_epilogue: the WY operator's sizes and options plus the layer's switches; A_log and
// dt_bias planned only with the gate in the kernel (A_log may be left out with a lower bound).
Plan decode_epilogue_plan(FuzzedDataProvider& fdp) {
  Plan p = decode_wy_plan_sizes(fdp);
  p.g_dtype = fdp.ConsumeBool() ? p.x : DType::f32;
  p.l2norm = fdp.ConsumeBool();
  p.gate_in_kernel = fdp.ConsumeBool();
  p.beta_sigmoid = fdp.ConsumeBool();
  p.allow_neg_eigval = p.beta_sigmoid && fdp.ConsumeBool();
  if (p.gate_in_kernel) {
    if (fdp.ConsumeBool()) p.lower_bound = fdp.PickValueInArray({-5.0, -1.0, -0.25});
    p.has_A_log = !p.lower_bound || fdp.ConsumeBool();
    p.has_dt_bias = fdp.ConsumeBool();
  }
  decode_chunks(fdp, p);
  return p;
}

// chunk_bwd_prep: the layer's sizes and switches (the epilogue's, without h, dh and scale); A_log
// and dt_bias planned only with the gate in the kernel (A_log may be left out with a lower bound).
Plan decode_prep_plan(FuzzedDataProvider& fdp) {
  Plan p;
  p.H = fdp.ConsumeIntegralInRange<int64_t>(1, 2);
  p.HV = p.H * fdp.ConsumeIntegralInRange<int64_t>(1, 3);
  p.K = fdp.PickValueInArray(kHeadDims);
  p.V = fdp.PickValueInArray(kHeadDims);
  p.BT = fdp.PickValueInArray({int64_t{16}, int64_t{32}, int64_t{64}});
  p.x = fdp.PickValueInArray(kXDtypes);
  p.beta_dtype = fdp.ConsumeBool() ? p.x : DType::f32;
  p.g_dtype = fdp.ConsumeBool() ? p.x : DType::f32;
  p.l2norm = fdp.ConsumeBool();
  p.gate_in_kernel = fdp.ConsumeBool();
  p.beta_sigmoid = fdp.ConsumeBool();
  p.allow_neg_eigval = p.beta_sigmoid && fdp.ConsumeBool();
  if (p.gate_in_kernel) {
    if (fdp.ConsumeBool()) p.lower_bound = fdp.PickValueInArray({-5.0, -1.0, -0.25});
    p.has_A_log = !p.lower_bound || fdp.ConsumeBool();
    p.has_dt_bias = fdp.ConsumeBool();
  }
  decode_chunks(fdp, p);
  return p;
}

struct Intended {
  std::vector<int64_t> shape;
  DType dtype;
};

// The shape and dtype of the argument called `name` of chunk_bwd_wy_dqkg or chunk_bwd_intra (the
// two tables share their names where the tensors agree).
Intended intended_shared(const Plan& p, const std::string& name) {
  const std::vector<int64_t> qk{p.B, p.T, p.H, p.K};
  const std::vector<int64_t> vv{p.B, p.T, p.HV, p.V};
  const std::vector<int64_t> gk{p.B, p.T, p.HV, p.K};
  const std::vector<int64_t> state = p.state_v_first
                                         ? std::vector<int64_t>{p.B, p.NT, p.HV, p.V, p.K}
                                         : std::vector<int64_t>{p.B, p.NT, p.HV, p.K, p.V};
  if (name == "q" || name == "k") return {qk, p.x};
  if (name == "v" || name == "v_new" || name == "do" || name == "dv") return {vv, p.x};
  if (name == "g") return {gk, DType::f32};
  if (name == "beta") return {{p.B, p.T, p.HV}, p.beta_dtype};
  if (name == "A") return {{p.B, p.T, p.HV, p.BT}, p.x};
  if (name == "h" || name == "dh") return {state, p.h_dtype};
  if (name == "cu_seqlens") return {{static_cast<int64_t>(p.cu.size())}, p.cu_dtype};
  if (name == "chunk_indices") return {{p.NT, 2}, p.ci_dtype};
  if (name == "out.dv_out") return {vv, p.x};
  if (name == "db" || name == "out.db") return {{p.B, p.T, p.HV}, DType::f32};
  if (name == "out.dA" || name == "dAqk" || name == "dAkk") {
    return {{p.B, p.T, p.HV, p.BT}, DType::f32};
  }
  return {gk, DType::f32};  // dq, dk, dg (and chunk_bwd_intra's incoming dq, dk, dg)
}

// chunk_bwd_epilogue's: the shared names where its tensors agree, its own otherwise.
Intended intended_epilogue(const Plan& p, const std::string& name) {
  if (name == "g") return {{p.B, p.T, p.HV, p.K}, p.g_dtype};
  if (name == "out.dq" || name == "out.dk") return {{p.B, p.T, p.H, p.K}, p.x};
  if (name == "out.dv") return {{p.B, p.T, p.HV, p.V}, p.x};
  if (name == "out.dbeta") return {{p.B, p.T, p.HV}, DType::f32};
  if (name == "A_log" || name == "out.dA_log") return {{p.HV}, DType::f32};
  if (name == "dt_bias") return {{p.HV * p.K}, DType::f32};
  if (name == "out.ddt_bias") return {{p.HV, p.K}, DType::f32};
  return intended_shared(p, name);
}

// chunk_bwd_prep's: its inputs are the epilogue's where they share names; A and Aqk alike; its
// outputs per value head.
Intended intended_prep(const Plan& p, const std::string& name) {
  const std::vector<int64_t> gk{p.B, p.T, p.HV, p.K};
  if (name == "Aqk") return {{p.B, p.T, p.HV, p.BT}, p.x};
  if (name == "out.gk") return {gk, DType::f32};
  if (name == "out.w" || name == "out.qg" || name == "out.kg") return {gk, p.x};
  if (name == "out.u" || name == "out.dv") return {{p.B, p.T, p.HV, p.V}, p.x};
  return intended_epilogue(p, name);
}

// --- the operators ------------------------------------------------------------------------
// What differs between the operators' harnesses; everything else goes by the argument tables.
// A new operator: a struct like these, its plan decoder above, and an entry in kOperators.

struct WyDqkg {
  using Problem = kda::ChunkBwdWyDqkgProblem;
  static constexpr Slot<Problem> kSlots[] = {KDA_CHUNK_BWD_WY_DQKG_ARGS(KDA_FUZZ_SLOT)};
  static constexpr int kNumSlots = static_cast<int>(std::size(kSlots));
  static constexpr int kQ = slot_named(kSlots, "q"), kG = slot_named(kSlots, "g");
  static constexpr int kBeta = slot_named(kSlots, "beta"), kA = slot_named(kSlots, "A");
  static constexpr int kCu = slot_named(kSlots, "cu_seqlens");
  static constexpr int kCi = slot_named(kSlots, "chunk_indices");
  static constexpr const char* kCValidate = "kda_chunk_bwd_wy_dqkg_validate()";

  static Plan decode_plan(FuzzedDataProvider& fdp) { return decode_wy_plan(fdp); }
  static Intended intended(const Plan& p, const std::string& name) {
    return intended_shared(p, name);
  }
  static bool given_optional(const Plan& /*p*/, const std::string& /*name*/) { return false; }
  static void set_options(const Plan& p, Problem& problem) {
    problem.chunk_size = p.BT;
    problem.state_v_first = p.state_v_first;
    problem.scale = p.scale;
  }
  // perturb()'s cases 10 and 11: the options other than chunk_size.
  static void perturb_option(FuzzedDataProvider& fdp, int which, Problem& problem) {
    if (which == 10) {
      problem.scale = fdp.PickValueInArray(
          {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
           -std::numeric_limits<double>::infinity(), 1e300, -3.5e38});
    } else {
      problem.state_v_first = !problem.state_v_first;
    }
  }
  // The rules of those options, restated: why the problem must be rejected ("" if it need not).
  static std::string judge_options(const Plan& p, const Problem& problem) {
    std::string why;
    if (problem.scale && !(std::fabs(*problem.scale) <= std::numeric_limits<float>::max())) {
      why += "scale not finite in float32; ";
    }
    if (problem.state_v_first != p.state_v_first && p.K != p.V) {
      why += "state_v_first flipped with K != V; ";
    }
    return why;
  }
  // Whether extent d of `name` defines NT (device cu_seqlens without chunk_indices): h's, dh's
  // chunk count.
  static bool defines_nt(const std::string& name, int d) {
    return (name == "h" || name == "dh") && d == 1;
  }
  // An input value drawn for slot s.
  static double draw(int s, uint64_t& rng, bool extreme_gates) {
    if (s == kG)
      return extreme_gates ? (splitmix64(rng) % 2 ? 0.0 : -60.0) : uniform(rng, -4.0, 0.0);
    if (s == kBeta) return uniform(rng, 0.0, 1.0);
    if (s == kA) return uniform(rng, -1.0, 1.0);
    return uniform(rng, -2.0, 2.0);
  }
  // g is rewritten as a non-increasing cumulative gate after the draws (chunk_bwd_intra's).
  static constexpr bool kCumulativeGates = false;
  static std::string describe_options(const Problem& problem) {
    return std::string("scale ") +
           (problem.scale ? std::to_string(*problem.scale) : std::string("None")) +
           ", state_v_first " + (problem.state_v_first ? "1" : "0");
  }
  // Options under which finite, moderate inputs must give finite outputs.
  static bool moderate_options(const Problem& problem) {
    return !problem.scale || std::fabs(*problem.scale) <= 16.0;
  }
  static kda_status c_validate(const Problem& problem) {
    const kda_chunk_bwd_wy_dqkg_problem c_problem = kda::testing::to_c(problem);
    return kda_chunk_bwd_wy_dqkg_validate(&c_problem);
  }
};

struct Intra {
  using Problem = kda::ChunkBwdIntraProblem;
  static constexpr Slot<Problem> kSlots[] = {KDA_CHUNK_BWD_INTRA_ARGS(KDA_FUZZ_SLOT)};
  static constexpr int kNumSlots = static_cast<int>(std::size(kSlots));
  static constexpr int kQ = slot_named(kSlots, "q"), kG = slot_named(kSlots, "g");
  static constexpr int kBeta = slot_named(kSlots, "beta");
  static constexpr int kCu = slot_named(kSlots, "cu_seqlens");
  static constexpr int kCi = slot_named(kSlots, "chunk_indices");
  static constexpr const char* kCValidate = "kda_chunk_bwd_intra_validate()";

  static Plan decode_plan(FuzzedDataProvider& fdp) { return decode_intra_plan(fdp); }
  static Intended intended(const Plan& p, const std::string& name) {
    return intended_shared(p, name);
  }
  static bool given_optional(const Plan& /*p*/, const std::string& /*name*/) { return false; }
  static void set_options(const Plan& p, Problem& problem) {
    problem.chunk_size = p.BT;
    problem.safe_gate = p.safe_gate;
  }
  // safe_gate is the only other option, and every value of it is valid.
  static void perturb_option(FuzzedDataProvider& /*fdp*/, int /*which*/, Problem& problem) {
    problem.safe_gate = !problem.safe_gate;
  }
  static std::string judge_options(const Plan& /*p*/, const Problem& /*problem*/) { return ""; }
  // No tensor has a chunk dimension: every extent is checked against another tensor's.
  static bool defines_nt(const std::string& /*name*/, int /*d*/) { return false; }
  static double draw(int s, uint64_t& rng, bool /*extreme_gates*/) {
    if (s == kG) return uniform(rng, -4.0, 0.0);
    if (s == kBeta) return uniform(rng, 0.0, 1.0);
    if (s == slot_named(kSlots, "dAqk") || s == slot_named(kSlots, "dAkk")) {
      return uniform(rng, -1.0, 1.0);
    }
    return uniform(rng, -2.0, 2.0);
  }
  // With extreme gates, g becomes what SPEC-chunk-bwd-intra.md promises the backends: finite and
  // non-increasing along time in every channel (here over the whole batch row, so inside every
  // chunk too), with per-token decays of 0, up to 7.21 (safe_gate's bound) or 60, reaching about
  // -2400: outputs must stay finite however strong the decay.
  static constexpr bool kCumulativeGates = true;
  static std::string describe_options(const Problem& problem) {
    return std::string("safe_gate ") + (problem.safe_gate ? "1" : "0");
  }
  static bool moderate_options(const Problem& /*problem*/) { return true; }
  static kda_status c_validate(const Problem& problem) {
    const kda_chunk_bwd_intra_problem c_problem = kda::testing::to_c(problem);
    return kda_chunk_bwd_intra_validate(&c_problem);
  }
};

struct Epilogue {
  using Problem = kda::ChunkBwdEpilogueProblem;
  static constexpr Slot<Problem> kSlots[] = {KDA_CHUNK_BWD_EPILOGUE_ARGS(KDA_FUZZ_SLOT)};
  static constexpr int kNumSlots = static_cast<int>(std::size(kSlots));
  static constexpr int kQ = slot_named(kSlots, "q"), kG = slot_named(kSlots, "g");
  static constexpr int kBeta = slot_named(kSlots, "beta"), kA = slot_named(kSlots, "A");
  static constexpr int kALog = slot_named(kSlots, "A_log");
  static constexpr int kDtBias = slot_named(kSlots, "dt_bias");
  static constexpr int kCu = slot_named(kSlots, "cu_seqlens");
  static constexpr int kCi = slot_named(kSlots, "chunk_indices");
  static constexpr const char* kCValidate = "kda_chunk_bwd_epilogue_validate()";

  static Plan decode_plan(FuzzedDataProvider& fdp) { return decode_epilogue_plan(fdp); }
  static Intended intended(const Plan& p, const std::string& name) {
    return intended_epilogue(p, name);
  }
  static bool given_optional(const Plan& p, const std::string& name) {
    return (name == "A_log" && p.has_A_log) || (name == "dt_bias" && p.has_dt_bias);
  }
  static void set_options(const Plan& p, Problem& problem) {
    problem.chunk_size = p.BT;
    problem.state_v_first = p.state_v_first;
    problem.scale = p.scale;
    problem.use_qk_l2norm_in_kernel = p.l2norm;
    problem.use_gate_in_kernel = p.gate_in_kernel;
    problem.use_beta_sigmoid_in_kernel = p.beta_sigmoid;
    problem.allow_neg_eigval = p.allow_neg_eigval;
    problem.lower_bound = p.lower_bound;
  }
  // perturb()'s cases 10 and 11: a float option to an extreme, or a switch flipped.
  static void perturb_option(FuzzedDataProvider& fdp, int which, Problem& problem) {
    if (which == 10) {
      std::optional<double>& option = fdp.ConsumeBool() ? problem.scale : problem.lower_bound;
      option = fdp.PickValueInArray({std::numeric_limits<double>::quiet_NaN(),
                                     -std::numeric_limits<double>::infinity(), 1e300, -3.5e38, 0.0,
                                     2.0});
      return;
    }
    switch (fdp.ConsumeIntegralInRange(0, 4)) {
      case 0:
        problem.use_gate_in_kernel = !problem.use_gate_in_kernel;
        break;
      case 1:
        problem.use_beta_sigmoid_in_kernel = !problem.use_beta_sigmoid_in_kernel;
        break;
      case 2:
        problem.allow_neg_eigval = !problem.allow_neg_eigval;
        break;
      case 3:
        problem.use_qk_l2norm_in_kernel = !problem.use_qk_l2norm_in_kernel;
        break;
      default:
        problem.state_v_first = !problem.state_v_first;
        break;
    }
  }
  // The rules of the options and of A_log / dt_bias, restated ("" if none breaks).
  static std::string judge_options(const Plan& p, const Problem& problem) {
    const auto f32_range = [](const std::optional<double>& x) {
      return !x || std::fabs(*x) <= std::numeric_limits<float>::max();
    };
    std::string why;
    if (!f32_range(problem.scale)) why += "scale not finite in float32; ";
    if (problem.state_v_first != p.state_v_first && p.K != p.V) {
      why += "state_v_first flipped with K != V; ";
    }
    const bool has_A_log = !problem.A_log.empty_arg(), has_bias = !problem.dt_bias.empty_arg();
    if (!problem.use_gate_in_kernel) {
      if (has_A_log || has_bias) why += "A_log or dt_bias without the gate in the kernel; ";
      if (problem.lower_bound) why += "lower_bound without the gate in the kernel; ";
    } else {
      if (!has_A_log && !problem.lower_bound) why += "the gate without A_log or lower_bound; ";
      if (problem.lower_bound && !(*problem.lower_bound < 0.0)) why += "lower_bound >= 0; ";
      if (!f32_range(problem.lower_bound)) why += "lower_bound not finite in float32; ";
    }
    if (problem.allow_neg_eigval && !problem.use_beta_sigmoid_in_kernel) {
      why += "allow_neg_eigval without the beta sigmoid; ";
    }
    return why;
  }
  static bool defines_nt(const std::string& name, int d) {
    return (name == "h" || name == "dh") && d == 1;
  }
  static double draw(int s, uint64_t& rng, bool extreme_gates) {
    if (s == kG) {
      // The gate's raw input, or per-token natural-log decays (0 or -60 when extreme).
      if (extreme_gates) return splitmix64(rng) % 2 ? 0.0 : -60.0;
      return uniform(rng, -4.0, 0.5);
    }
    if (s == kBeta) return uniform(rng, -3.0, 3.0);
    if (s == kA) return uniform(rng, -1.0, 1.0);
    if (s == kALog) return uniform(rng, -1.0, 2.0);
    if (s == kDtBias) return uniform(rng, -1.0, 1.0);
    return uniform(rng, -2.0, 2.0);
  }
  static constexpr bool kCumulativeGates = false;
  static std::string describe_options(const Problem& problem) {
    return std::string("scale ") +
           (problem.scale ? std::to_string(*problem.scale) : std::string("None")) +
           ", state_v_first " + (problem.state_v_first ? "1" : "0") + ", l2norm " +
           (problem.use_qk_l2norm_in_kernel ? "1" : "0") + ", gate " +
           (problem.use_gate_in_kernel ? "1" : "0") + ", lower_bound " +
           (problem.lower_bound ? std::to_string(*problem.lower_bound) : std::string("None")) +
           ", beta_sigmoid " + (problem.use_beta_sigmoid_in_kernel ? "1" : "0") +
           ", allow_neg_eigval " + (problem.allow_neg_eigval ? "1" : "0");
  }
  // Without the gate in the kernel g is taken as the per-token log decay: a positive one grows
  // the state without bound, so only non-positive draws are moderate then; a bounded gate and
  // a moderate scale keep every exponent finite.
  // Finite outputs are promised only where the exact gradients fit the outputs' dtype: not for
  // float16 with l2norm, whose backward divides by ||x|| >= 1e-3 (the 1e-6 floor under the
  // root), so that a near-zero row takes dq or dk past 65504 (found by fuzz_problem: K = 1,
  // scale 16).
  static bool moderate_options(const Problem& problem) {
    return problem.use_gate_in_kernel && (!problem.scale || std::fabs(*problem.scale) <= 16.0) &&
           (!problem.lower_bound || std::fabs(*problem.lower_bound) <= 16.0) &&
           !(problem.use_qk_l2norm_in_kernel && problem.q.dtype == kda::DType::f16);
  }
  static kda_status c_validate(const Problem& problem) {
    const kda_chunk_bwd_epilogue_problem c_problem = kda::testing::to_c(problem);
    return kda_chunk_bwd_epilogue_validate(&c_problem);
  }
};

struct Prep {
  using Problem = kda::ChunkBwdPrepProblem;
  static constexpr Slot<Problem> kSlots[] = {KDA_CHUNK_BWD_PREP_ARGS(KDA_FUZZ_SLOT)};
  static constexpr int kNumSlots = static_cast<int>(std::size(kSlots));
  static constexpr int kQ = slot_named(kSlots, "q"), kG = slot_named(kSlots, "g");
  static constexpr int kBeta = slot_named(kSlots, "beta"), kA = slot_named(kSlots, "A");
  static constexpr int kAqk = slot_named(kSlots, "Aqk");
  static constexpr int kALog = slot_named(kSlots, "A_log");
  static constexpr int kDtBias = slot_named(kSlots, "dt_bias");
  static constexpr int kCu = slot_named(kSlots, "cu_seqlens");
  static constexpr int kCi = slot_named(kSlots, "chunk_indices");
  static constexpr const char* kCValidate = "kda_chunk_bwd_prep_validate()";

  static Plan decode_plan(FuzzedDataProvider& fdp) { return decode_prep_plan(fdp); }
  static Intended intended(const Plan& p, const std::string& name) {
    return intended_prep(p, name);
  }
  static bool given_optional(const Plan& p, const std::string& name) {
    return (name == "A_log" && p.has_A_log) || (name == "dt_bias" && p.has_dt_bias);
  }
  static void set_options(const Plan& p, Problem& problem) {
    problem.chunk_size = p.BT;
    problem.use_qk_l2norm_in_kernel = p.l2norm;
    problem.use_gate_in_kernel = p.gate_in_kernel;
    problem.use_beta_sigmoid_in_kernel = p.beta_sigmoid;
    problem.allow_neg_eigval = p.allow_neg_eigval;
    problem.lower_bound = p.lower_bound;
  }
  // perturb()'s cases 10 and 11: lower_bound to an extreme, or a switch flipped.
  static void perturb_option(FuzzedDataProvider& fdp, int which, Problem& problem) {
    if (which == 10) {
      problem.lower_bound = fdp.PickValueInArray({std::numeric_limits<double>::quiet_NaN(),
                                                  -std::numeric_limits<double>::infinity(), 1e300,
                                                  -3.5e38, 0.0, 2.0});
      return;
    }
    switch (fdp.ConsumeIntegralInRange(0, 3)) {
      case 0:
        problem.use_gate_in_kernel = !problem.use_gate_in_kernel;
        break;
      case 1:
        problem.use_beta_sigmoid_in_kernel = !problem.use_beta_sigmoid_in_kernel;
        break;
      case 2:
        problem.allow_neg_eigval = !problem.allow_neg_eigval;
        break;
      default:
        problem.use_qk_l2norm_in_kernel = !problem.use_qk_l2norm_in_kernel;
        break;
    }
  }
  // The rules of the options and of A_log / dt_bias, restated ("" if none breaks).
  static std::string judge_options(const Plan& /*p*/, const Problem& problem) {
    std::string why;
    const bool has_A_log = !problem.A_log.empty_arg(), has_bias = !problem.dt_bias.empty_arg();
    if (!problem.use_gate_in_kernel) {
      if (has_A_log || has_bias) why += "A_log or dt_bias without the gate in the kernel; ";
      if (problem.lower_bound) why += "lower_bound without the gate in the kernel; ";
    } else {
      if (!has_A_log && !problem.lower_bound) why += "the gate without A_log or lower_bound; ";
      if (problem.lower_bound && !(*problem.lower_bound < 0.0)) why += "lower_bound >= 0; ";
      if (problem.lower_bound &&
          !(std::fabs(*problem.lower_bound) <= std::numeric_limits<float>::max())) {
        why += "lower_bound not finite in float32; ";
      }
    }
    if (problem.allow_neg_eigval && !problem.use_beta_sigmoid_in_kernel) {
      why += "allow_neg_eigval without the beta sigmoid; ";
    }
    return why;
  }
  // No tensor has a chunk dimension: every extent is checked against another tensor's.
  static bool defines_nt(const std::string& /*name*/, int /*d*/) { return false; }
  static double draw(int s, uint64_t& rng, bool extreme_gates) {
    if (s == kG) {
      // The gate's raw input, or per-token natural-log decays (0 or -60 when extreme).
      if (extreme_gates) return splitmix64(rng) % 2 ? 0.0 : -60.0;
      return uniform(rng, -4.0, 0.5);
    }
    if (s == kBeta) return uniform(rng, -3.0, 3.0);
    if (s == kA || s == kAqk) return uniform(rng, -1.0, 1.0);
    if (s == kALog) return uniform(rng, -1.0, 2.0);
    if (s == kDtBias) return uniform(rng, -1.0, 1.0);
    return uniform(rng, -2.0, 2.0);
  }
  static constexpr bool kCumulativeGates = false;
  static std::string describe_options(const Problem& problem) {
    return std::string("l2norm ") + (problem.use_qk_l2norm_in_kernel ? "1" : "0") + ", gate " +
           (problem.use_gate_in_kernel ? "1" : "0") + ", lower_bound " +
           (problem.lower_bound ? std::to_string(*problem.lower_bound) : std::string("None")) +
           ", beta_sigmoid " + (problem.use_beta_sigmoid_in_kernel ? "1" : "0") +
           ", allow_neg_eigval " + (problem.allow_neg_eigval ? "1" : "0");
  }
  // Without the gate in the kernel g is taken as the per-token log decay: a positive one makes
  // 2^gk grow without bound, so only the gate in the kernel (never positive) is moderate, with a
  // moderate lower bound; then every factor 2^gk, 2^(gk_last - gk) is at most 1.
  static bool moderate_options(const Problem& problem) {
    return problem.use_gate_in_kernel &&
           (!problem.lower_bound || std::fabs(*problem.lower_bound) <= 16.0);
  }
  static kda_status c_validate(const Problem& problem) {
    const kda_chunk_bwd_prep_problem c_problem = kda::testing::to_c(problem);
    return kda_chunk_bwd_prep_validate(&c_problem);
  }
};

#undef KDA_FUZZ_SLOT

// Strides for `shape` in one of several layouts: row-major, a permuted dense order, padded,
// broadcast (one stride 0) or arbitrary small strides.
void choose_layout(FuzzedDataProvider& fdp, int mode, TensorView& t) {
  const int rank = t.rank;
  std::array<int, kda::kMaxRank> order{};  // order[0] is the outermost dimension in memory
  for (int d = 0; d < rank; ++d) order[d] = d;
  if (mode == 1 && rank >= 2) {
    const int a = fdp.ConsumeIntegralInRange(0, rank - 1);
    const int b = fdp.ConsumeIntegralInRange(0, rank - 1);
    std::swap(order[a], order[b]);
  }
  const int padded = mode == 2 && rank > 0 ? fdp.ConsumeIntegralInRange(0, rank - 1) : -1;
  const int64_t pad = padded >= 0 ? fdp.ConsumeIntegralInRange<int64_t>(1, 5) : 0;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const int d = order[i];
    t.strides[d] = stride;
    stride *= t.shape[d] + (d == padded ? pad : 0);
  }
  if (mode == 3 && rank > 0) t.strides[fdp.ConsumeIntegralInRange(0, rank - 1)] = 0;
  if (mode == 4) {
    for (int d = 0; d < rank; ++d) t.strides[d] = fdp.ConsumeIntegralInRange<int64_t>(0, 40);
  }
}

// --- the descriptor, possibly broken -------------------------------------------------------

// One index tensor entry changed: (slot, flat element, value).
struct IndexEdit {
  int slot;
  int64_t element;
  int64_t value;
};

template <typename Op>
struct Case {
  Plan plan;
  typename Op::Problem problem;
  std::array<bool, Op::kNumSlots> given{};  // passed to the library (optional ones may not be)
  std::array<bool, Op::kNumSlots> null_data{};
  std::array<int, Op::kNumSlots> misalign{};  // bytes added to the pointer
  std::array<int, Op::kNumSlots> alias_of{};  // -1, or the slot whose buffer this one shares
  bool all_on_cuda = false;
  bool garbage_enum = false;  // a dtype, rank or device type outside its enum
  bool cu_edited = false;     // cu_seqlens contents no longer as planned
  bool ci_edited = false;     // chunk_indices contents no longer as planned
  bool perturbed = false;     // any deliberate break, even one that may leave it valid
  std::string must_reject;    // why the harness knows the problem is invalid ("" if not)
  // Value injection.
  int special_slot = -1;
  int64_t special_element = 0;
  double special_value = 0.0;
  bool extreme_gates = false;
  uint64_t value_seed = 0;
  std::vector<IndexEdit> edits;

  TensorView& view(int slot) { return problem.*(Op::kSlots[slot].member); }
  const TensorView& view(int slot) const { return problem.*(Op::kSlots[slot].member); }
  void reject_because(const std::string& why) { must_reject += why + "; "; }
};

template <typename Op>
void perturb(FuzzedDataProvider& fdp, Case<Op>& c) {
  c.perturbed = true;
  const int slot = fdp.ConsumeIntegralInRange(0, Op::kNumSlots - 1);
  TensorView& t = c.view(slot);
  const bool index = Op::kSlots[slot].is_index;
  const bool present = c.given[slot];
  const int kind = fdp.ConsumeIntegralInRange(0, 14);
  switch (kind) {
    case 0: {  // one extent changed
      if (!present || t.rank <= 0 || t.rank > kda::kMaxRank) return;
      const int d = fdp.ConsumeIntegralInRange(0, t.rank - 1);
      // Clamped so that the candidates below cannot overflow after an earlier edit.
      const int64_t e = std::clamp(t.shape[d], int64_t{-1}, int64_t{1} << 40);
      // validate() reads index tensors: give them only extents the harness can back.
      t.shape[d] = index ? fdp.PickValueInArray({int64_t{0}, e - 1, e + 1, 2 * e + 1, int64_t{-1}})
                         : fdp.PickValueInArray({int64_t{0}, e - 1, e + 1, 2 * e + 1, int64_t{-1},
                                                 int64_t{1} << 31, int64_t{1} << 40,
                                                 int64_t{1} << 62, kI64Max, kI64Min});
      return;
    }
    case 1: {  // rank changed, sometimes to a value outside 0..kMaxRank
      if (!present) return;
      const int32_t rank =
          fdp.PickValueInArray({1, 2, 3, 4, 5, 6, -1, 7, 64, std::numeric_limits<int32_t>::min()});
      for (int d = std::max(t.rank, 0); d < std::clamp(rank, 0, kda::kMaxRank); ++d) {
        t.shape[d] = 1;
        t.strides[d] = 0;
      }
      t.rank = rank;
      return;
    }
    case 2:  // dtype changed, sometimes to a value outside the enum
      if (!present) return;
      t.dtype = static_cast<DType>(fdp.PickValueInArray({0, 1, 2, 3, 4, 5, -1, 6, 99}));
      return;
    case 3: {  // one stride changed
      if (!present || t.rank <= 0 || t.rank > kda::kMaxRank) return;
      const int d = fdp.ConsumeIntegralInRange(0, t.rank - 1);
      const int64_t next = t.strides[d] < kI64Max ? t.strides[d] + 1 : 0;
      t.strides[d] = index ? fdp.PickValueInArray({int64_t{2}, int64_t{3}, int64_t{-1}})
                           : fdp.PickValueInArray({int64_t{0}, int64_t{-1}, next, int64_t{1} << 40,
                                                   int64_t{1} << 62, kI64Max});
      return;
    }
    case 4:  // a tensor other than an index tensor omitted (required, or A_log / dt_bias)
      if (!index) c.given[slot] = false;
      return;
    case 5:  // null data
      c.null_data[slot] = true;
      return;
    case 6:  // misaligned pointer
      c.misalign[slot] = 1;
      return;
    case 7:  // shares another tensor's buffer
      c.alias_of[slot] = fdp.ConsumeIntegralInRange(0, Op::kNumSlots - 1);
      if (c.alias_of[slot] == slot) c.alias_of[slot] = -1;
      return;
    case 8: {  // one tensor on another device
      const int which = fdp.ConsumeIntegralInRange(0, 2);
      if (which == 0) t.device = {kda::DeviceType::cuda, 0};
      if (which == 1) t.device = {kda::DeviceType::cpu, 1};
      if (which == 2) t.device = {static_cast<kda::DeviceType>(7), 0};
      return;
    }
    case 9:
      c.problem.chunk_size =
          fdp.PickValueInArray({int64_t{0}, int64_t{8}, int64_t{16}, int64_t{32}, int64_t{48},
                                int64_t{64}, int64_t{128}, int64_t{-64}, kI64Min});
      return;
    case 10:
    case 11:
      Op::perturb_option(fdp, kind, c.problem);
      return;
    case 12: {  // cu_seqlens contents
      if (!c.plan.varlen) return;
      const int64_t n = static_cast<int64_t>(c.plan.cu.size());
      const int64_t at = fdp.ConsumeIntegralInRange<int64_t>(0, n - 1);
      const int64_t was = c.plan.cu[static_cast<size_t>(at)];
      c.edits.push_back({Op::kCu, at,
                         fdp.PickValueInArray({int64_t{-1}, was - 1, was + 1, c.plan.T + 1,
                                               int64_t{1} << 40, kI64Max, kI64Min})});
      c.cu_edited = true;
      return;
    }
    case 13: {  // chunk_indices contents, or a chunk_indices in fixed-length mode
      if (!c.given[Op::kCi]) {
        TensorView& ci = c.view(Op::kCi);
        ci = TensorView{};
        ci.dtype = DType::i64;
        ci.rank = 2;
        ci.shape[0] = c.plan.NT;
        ci.shape[1] = 2;
        ci.strides[0] = 2;
        ci.strides[1] = 1;
        c.given[Op::kCi] = true;
        return;
      }
      if (!c.plan.varlen || c.plan.NT == 0) return;  // fixed length: nothing planned to edit
      const int64_t at = fdp.ConsumeIntegralInRange<int64_t>(0, 2 * c.plan.NT - 1);
      const int64_t was = c.plan.chunk_indices[static_cast<size_t>(at)];
      c.edits.push_back(
          {Op::kCi, at, fdp.PickValueInArray({int64_t{-1}, was + 1, int64_t{1} << 33, kI64Min})});
      c.ci_edited = true;
      return;
    }
    default:  // cu_seqlens dropped
      c.given[Op::kCu] = false;
      return;
  }
}

// The bytes are read in order of importance: FuzzedDataProvider returns defaults once the input
// runs out, and libFuzzer grows inputs slowly, so what comes first is explored first. The
// plan, then the deliberate breaks (kept as raw bytes, applied once the layouts exist), then
// values, and the layouts last (row-major by default).
template <typename Op>
Case<Op> decode_case(FuzzedDataProvider& fdp) {
  Case<Op> c;
  c.alias_of.fill(-1);
  c.plan = Op::decode_plan(fdp);
  const Plan& p = c.plan;
  const int perturbations =
      fdp.ConsumeIntegralInRange(0, 9) < 6 ? 0 : fdp.ConsumeIntegralInRange(1, 3);
  const std::vector<uint8_t> recipe = fdp.ConsumeBytes<uint8_t>(16 * perturbations);
  c.all_on_cuda = fdp.ConsumeIntegralInRange(0, 15) == 0;
  switch (fdp.ConsumeIntegralInRange(0, 7)) {
    case 0:  // one special value in one input
      c.special_slot = fdp.ConsumeIntegralInRange(0, Op::kNumSlots - 1);
      c.special_element = fdp.ConsumeIntegralInRange<int64_t>(0, 1 << 16);
      c.special_value = fdp.PickValueInArray(
          {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
           -std::numeric_limits<double>::infinity(), 1e30, -65504.0, 1e-40});
      break;
    case 1:
      c.extreme_gates = true;  // g in {0, -60}: exp2(gn - G) up to 2^60, still finite in f32
      break;
    default:
      break;
  }
  c.value_seed = fdp.ConsumeIntegral<uint64_t>();

  const bool scramble_outputs = fdp.ConsumeIntegralInRange(0, 7) == 0;
  for (int s = 0; s < Op::kNumSlots; ++s) {
    if (s == Op::kCu && !p.varlen) continue;
    if (s == Op::kCi && !p.pass_chunk_indices) continue;
    if (Op::kSlots[s].is_optional && !Op::kSlots[s].is_index &&
        !Op::given_optional(p, Op::kSlots[s].name)) {
      continue;
    }
    c.given[s] = true;
    const Intended want = Op::intended(p, Op::kSlots[s].name);
    TensorView& t = c.view(s);
    t.dtype = want.dtype;
    t.rank = static_cast<int32_t>(want.shape.size());
    for (int d = 0; d < t.rank; ++d) t.shape[d] = want.shape[static_cast<size_t>(d)];
    // Inputs take any layout (index tensors only those without self-overlap, or their planned
    // contents would not survive); outputs stay row-major unless this input scrambles one.
    int mode = fdp.ConsumeIntegralInRange(0, 7);
    mode = mode <= 3 ? 0 : mode - 3;
    if (Op::kSlots[s].is_index && mode > 2) mode = 0;
    if (Op::kSlots[s].is_output) mode = scramble_outputs && fdp.ConsumeBool() ? mode : 0;
    choose_layout(fdp, mode, t);
  }
  Op::set_options(p, c.problem);

  FuzzedDataProvider recipe_fdp(recipe.data(), recipe.size());
  for (int i = 0; i < perturbations; ++i) perturb(recipe_fdp, c);
  return c;
}

// What the harness knows about the final descriptor, judged from its state (so two edits that
// cancel out claim nothing). Called after place(), when data pointers are final.
template <typename Op>
void judge(Case<Op>& c, const std::array<std::optional<int64_t>, Op::kNumSlots>& spans) {
  const Plan& p = c.plan;
  const bool device_varlen = c.all_on_cuda && c.given[Op::kCu];
  for (int s = 0; s < Op::kNumSlots; ++s) {
    const TensorView& t = c.view(s);
    const std::string name = Op::kSlots[s].name;
    if (!c.given[s]) {
      if (!Op::kSlots[s].is_optional) c.reject_because(name + " omitted");
      continue;
    }
    if (!known_dtype(t.dtype) || t.rank < 0 || t.rank > kda::kMaxRank ||
        (t.device.type != kda::DeviceType::cpu && t.device.type != kda::DeviceType::cuda)) {
      c.garbage_enum = true;
      c.reject_because(name + " has an enum value outside its range");
      continue;
    }
    const Intended want = Op::intended(p, name);
    if (t.rank != static_cast<int32_t>(want.shape.size())) {
      c.reject_because(name + " rank changed");
      continue;
    }
    for (int d = 0; d < t.rank; ++d) {
      if (t.shape[d] < 0) c.reject_because(name + " negative extent");
      if (t.strides[d] < 0) c.reject_because(name + " negative stride");
      // Every extent of every tensor is checked against another tensor's, except the chunk
      // count of h/dh on a device (it then defines NT) and what index tensors hold.
      const bool defines_nt = device_varlen && !c.given[Op::kCi] && Op::defines_nt(name, d);
      if (!Op::kSlots[s].is_index && !defines_nt &&
          t.shape[d] != want.shape[static_cast<size_t>(d)]) {
        c.reject_because(name + " extent changed");
      }
    }
    if (!(t.device == c.view(Op::kQ).device)) c.reject_because(name + " on another device than q");
    if (c.null_data[s] && (!spans[s] || *spans[s] > 0)) c.reject_because(name + " null data");
    if (c.misalign[s] && t.data != nullptr) c.reject_because(name + " misaligned");
    if (Op::kSlots[s].is_output && !harness_contiguous(t))
      c.reject_because(name + " not contiguous");
  }
  if (c.problem.chunk_size != p.BT) c.reject_because("chunk_size changed");
  c.must_reject += Op::judge_options(p, c.problem);
  if (c.given[Op::kCi] && !c.given[Op::kCu]) c.reject_because("chunk_indices without cu_seqlens");
  // An edited chunk_indices entry on the host is compared with cu_seqlens; trust the edit only
  // when the view is row-major (no entry shares memory with another) and nothing else moved.
  if (c.ci_edited && !c.cu_edited && !c.all_on_cuda && c.given[Op::kCi] &&
      harness_contiguous(c.view(Op::kCi)) && c.view(Op::kCi).shape[0] == p.NT) {
    std::vector<int64_t> stored = p.chunk_indices;  // what fill_inputs writes: last edit wins
    for (const IndexEdit& e : c.edits) {
      if (e.slot != Op::kCi) continue;
      stored[static_cast<size_t>(e.element)] =
          c.view(Op::kCi).dtype == DType::i32 ? static_cast<int32_t>(e.value) : e.value;
    }
    if (stored != p.chunk_indices) c.reject_because("chunk_indices contents changed");
  }
  for (int s = 0; s < Op::kNumSlots; ++s) {  // realized aliases that involve an output
    const int a = c.alias_of[s];
    if (a < 0 || c.null_data[s] || c.null_data[a]) continue;
    const bool output = Op::kSlots[s].is_output || Op::kSlots[a].is_output;
    if (output && spans[s].value_or(0) > 0 && spans[a].value_or(0) > 0) {
      c.reject_because(std::string(Op::kSlots[s].name) + " shares memory with " +
                       Op::kSlots[a].name);
    }
  }
}

// --- memory -------------------------------------------------------------------------------

struct Buffer {
  uint8_t* base = nullptr;
  int64_t bytes = 0;
};

struct Memory {
  std::vector<Buffer> buffers;
  std::vector<int> buffer_of;  // per slot; -1: no host memory behind the view
  explicit Memory(int slots) : buffer_of(static_cast<size_t>(slots), -1) {}
  ~Memory() {
    for (Buffer& b : buffers) std::free(b.base);
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  int allocate(int64_t bytes) {
    // Exactly `bytes`: ASan's redzone starts right after the last byte a view may touch.
    auto* base = static_cast<uint8_t*>(std::malloc(static_cast<size_t>(bytes)));
    KDA_FUZZ_CHECK(base != nullptr || bytes == 0, "malloc(%lld) failed",
                   static_cast<long long>(bytes));
    buffers.push_back({base, bytes});
    return static_cast<int>(buffers.size()) - 1;
  }
};

// Gives every view its data pointer, records which views the harness backs with memory, and
// judges the result.
template <typename Op>
void place(Case<Op>& c, Memory& mem, bool& all_backed) {
  all_backed = true;
  std::array<std::optional<int64_t>, Op::kNumSlots> spans{};
  for (int s = 0; s < Op::kNumSlots; ++s) spans[s] = span_bytes(c.view(s));
  int64_t forbidden_offset = 0;
  for (int s = 0; s < Op::kNumSlots; ++s) {
    TensorView& t = c.view(s);
    if (!c.given[s]) {
      t = TensorView{};
      c.alias_of[s] = -1;
      continue;
    }
    if (c.all_on_cuda) t.device = {kda::DeviceType::cuda, 0};
    const bool on_host = t.device.type == kda::DeviceType::cpu;
    if (!on_host || !spans[s] || *spans[s] > kMaxSpanBytes) {
      // Distinct addresses, so that overlapping is never the only reason to reject.
      t.data = forbidden_region() + forbidden_offset + c.misalign[s];
      forbidden_offset += 1 << 20;
      c.alias_of[s] = -1;  // no shared host buffer
      if (on_host) all_backed = false;
      continue;
    }
    const int alias = c.alias_of[s];
    if (alias >= 0 && alias < s && mem.buffer_of[alias] >= 0 && c.misalign[alias] == 0 &&
        c.misalign[s] == 0) {
      // Share: grow the buffer if this view spans more, so that no view overruns it.
      const int shared = mem.buffer_of[alias];
      Buffer& b = mem.buffers[static_cast<size_t>(shared)];
      if (*spans[s] > b.bytes) {
        std::free(b.base);
        b.base = static_cast<uint8_t*>(std::malloc(static_cast<size_t>(*spans[s])));
        b.bytes = *spans[s];
        for (int o = 0; o < s; ++o) {
          if (mem.buffer_of[o] == shared) c.view(o).data = b.base;
        }
      }
      mem.buffer_of[s] = shared;
      t.data = b.base;
      continue;
    }
    c.alias_of[s] = -1;  // not realized
    mem.buffer_of[s] = mem.allocate(*spans[s] + c.misalign[s]);
    t.data = mem.buffers.back().base + c.misalign[s];
  }
  for (int s = 0; s < Op::kNumSlots; ++s) {
    if (c.given[s] && c.null_data[s]) c.view(s).data = nullptr;
    // Rank 0 and null data is how an argument is omitted: judge it as omitted.
    if (c.given[s] && c.view(s).empty_arg()) c.given[s] = false;
  }
  judge(c, spans);
}

// --- values -------------------------------------------------------------------------------

// True when no two elements of `t` (non-negative extents and strides) share memory: sorted by
// stride, each dimension's stride clears the span of the dimensions inside it.
bool distinct_elements(const TensorView& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, extent), extents above 1
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] > 1) dims.emplace_back(t.strides[d], t.shape[d]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;  // elements from the first to the last of the inner dimensions, plus one
  for (const auto& [stride, extent] : dims) {
    if (stride < span) return false;
    span += stride * (extent - 1);
  }
  return true;
}

// Rewrites g ([B, T, HV, K], its own buffer) as a cumulative gate: non-increasing along time in
// every (batch row, value head, channel), per-token decays of 0, up to 7.21 or 60 (see Intra).
// Left as drawn where the view is not the planned one or its elements overlap (a broadcast or
// arbitrary stride): the drawn gates are moderate, so outputs must still be finite.
template <typename Op>
void fill_cumulative_gates(const Case<Op>& c, const TensorView& g, uint64_t& rng) {
  const Plan& p = c.plan;
  if (g.rank != 4 || g.shape[0] != p.B || g.shape[1] != p.T || g.shape[2] != p.HV ||
      g.shape[3] != p.K || !distinct_elements(g)) {
    return;
  }
  std::vector<double> gate(static_cast<size_t>(p.HV * p.K));
  for (int64_t b = 0; b < p.B; ++b) {
    std::fill(gate.begin(), gate.end(), 0.0);
    for (int64_t t = 0; t < p.T; ++t) {
      for (int64_t hv = 0; hv < p.HV; ++hv) {
        for (int64_t k = 0; k < p.K; ++k) {
          double& value = gate[static_cast<size_t>(hv * p.K + k)];
          const uint64_t kind = splitmix64(rng) % 3;
          value -= kind == 0 ? 0.0 : kind == 1 ? 60.0 : uniform(rng, 0.0, 7.21);
          const int64_t offset =
              b * g.strides[0] + t * g.strides[1] + hv * g.strides[2] + k * g.strides[3];
          kda::store_float(g, offset, static_cast<float>(value));
        }
      }
    }
  }
}

template <typename Op>
void fill_inputs(const Case<Op>& c, Memory& mem) {
  uint64_t rng = c.value_seed;
  for (int s = 0; s < Op::kNumSlots; ++s) {
    const TensorView& t = c.problem.*(Op::kSlots[s].member);
    const int buf = mem.buffer_of[s];
    if (Op::kSlots[s].is_output || buf < 0 || t.data == nullptr || c.alias_of[s] >= 0) continue;
    Buffer& b = mem.buffers[static_cast<size_t>(buf)];
    const int64_t elem = static_cast<int64_t>(kda::dtype_size(t.dtype));
    const int64_t count = (b.bytes - (static_cast<uint8_t*>(t.data) - b.base)) / elem;
    if (Op::kSlots[s].is_index && c.misalign[s] == 0) {
      // Planned values in the view's row-major order, zeros wherever the view holds more.
      const std::vector<int64_t>& planned = s == Op::kCu ? c.plan.cu : c.plan.chunk_indices;
      std::memset(t.data, 0, static_cast<size_t>(count * elem));
      int64_t i = 0;
      kda::fuzz::for_each_offset(t, [&](int64_t offset) {
        int64_t value =
            i < static_cast<int64_t>(planned.size()) ? planned[static_cast<size_t>(i)] : 0;
        for (const IndexEdit& e : c.edits) {
          if (e.slot == s && e.element == i) value = e.value;
        }
        if (t.dtype == DType::i32)
          static_cast<int32_t*>(t.data)[offset] = static_cast<int32_t>(value);
        if (t.dtype == DType::i64) static_cast<int64_t*>(t.data)[offset] = value;
        ++i;
      });
      continue;
    }
    if (!kda::dtype_is_float(t.dtype) || c.misalign[s] != 0) {
      // An integer dtype on a float tensor, or a misaligned pointer (no typed store there):
      // validation rejects both, so any bytes do.
      std::memset(t.data, 0x11, static_cast<size_t>(count * elem));
      continue;
    }
    for (int64_t i = 0; i < count; ++i) {
      double value = Op::draw(s, rng, c.extreme_gates);
      if (s == c.special_slot && i == c.special_element % count) value = c.special_value;
      kda::store_float(t, i, static_cast<float>(value));
    }
    if (Op::kCumulativeGates && s == Op::kG && c.extreme_gates) fill_cumulative_gates(c, t, rng);
  }
}

// --- checks -------------------------------------------------------------------------------

// With KDA_FUZZ_VERBOSE set (when replaying one input), what the harness built, field by field
// and without calling into the library, which may be what crashes.
template <typename Op>
void print_case(const Case<Op>& c, const Memory& mem) {
  std::fprintf(stderr, "fuzz_problem case (%s): chunk_size %lld, %s, all_on_cuda %d\n",
               Op::Problem::kName, static_cast<long long>(c.problem.chunk_size),
               Op::describe_options(c.problem).c_str(), c.all_on_cuda ? 1 : 0);
  for (int s = 0; s < Op::kNumSlots; ++s) {
    const TensorView& t = c.view(s);
    std::string line = std::string("  ") + Op::kSlots[s].name + ": ";
    if (!c.given[s]) {
      std::fprintf(stderr, "%somitted\n", line.c_str());
      continue;
    }
    line += "dtype " + std::to_string(static_cast<int>(t.dtype)) + " rank " +
            std::to_string(t.rank) + " device " + std::to_string(static_cast<int>(t.device.type)) +
            ":" + std::to_string(t.device.index) + " shape [";
    for (int d = 0; d < std::clamp(t.rank, 0, kda::kMaxRank); ++d) {
      line += (d ? ", " : "") + std::to_string(t.shape[d]);
    }
    line += "] strides [";
    for (int d = 0; d < std::clamp(t.rank, 0, kda::kMaxRank); ++d) {
      line += (d ? ", " : "") + std::to_string(t.strides[d]);
    }
    line += "]";
    if (c.null_data[s]) line += " null";
    if (c.misalign[s]) line += " misaligned";
    if (c.alias_of[s] >= 0) line += std::string(" shares ") + Op::kSlots[c.alias_of[s]].name;
    const bool integer = t.dtype == DType::i32 || t.dtype == DType::i64;
    if (Op::kSlots[s].is_index && integer && mem.buffer_of[s] >= 0 && c.misalign[s] == 0 &&
        t.data != nullptr) {
      line += " values";
      kda::fuzz::for_each_offset(t, [&](int64_t offset) {
        line += " " + std::to_string(t.dtype == DType::i32 ? static_cast<int32_t*>(t.data)[offset]
                                                           : static_cast<int64_t*>(t.data)[offset]);
      });
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  for (const IndexEdit& e : c.edits) {
    std::fprintf(stderr, "  edit: %s element %lld := %lld\n", Op::kSlots[e.slot].name,
                 static_cast<long long>(e.element), static_cast<long long>(e.value));
  }
  std::fprintf(stderr, "  must reject: %s\n", c.must_reject.empty() ? "-" : c.must_reject.c_str());
}

std::vector<std::vector<uint8_t>> snapshot(const Memory& mem) {
  std::vector<std::vector<uint8_t>> copy;
  for (const Buffer& b : mem.buffers) copy.emplace_back(b.base, b.base + b.bytes);
  return copy;
}

template <typename Op>
bool finite_inputs_expected(const Case<Op>& c) {
  if (c.special_slot >= 0 && !Op::kSlots[c.special_slot].is_output &&
      !Op::kSlots[c.special_slot].is_index) {
    return false;
  }
  for (int s = 0; s < Op::kNumSlots; ++s) {
    if (c.alias_of[s] >= 0) return false;  // another dtype's bytes may read as NaN
  }
  return Op::moderate_options(c.problem);
}

// Runs one backend on an accepted problem and checks every promise; returns the outputs.
// Only the output views' own elements are poisoned and may change: a buffer can also back an
// empty output next to an input (an empty view overlaps nothing), so whole buffers are not theirs.
template <typename Op>
std::vector<std::vector<double>> run_and_check(const Case<Op>& c, Memory& mem,
                                               kda::Backend backend) {
  const char* name = backend == kda::Backend::cpu ? "cpu" : "cpu-ref";
  std::vector<std::vector<bool>> writable(mem.buffers.size());
  for (size_t b = 0; b < mem.buffers.size(); ++b) {
    writable[b].assign(static_cast<size_t>(mem.buffers[b].bytes), false);
  }
  for (int s = 0; s < Op::kNumSlots; ++s) {
    if (!Op::kSlots[s].is_output || mem.buffer_of[s] < 0) continue;
    const TensorView& t = c.problem.*(Op::kSlots[s].member);
    const size_t buf = static_cast<size_t>(mem.buffer_of[s]);
    const int64_t elem = static_cast<int64_t>(kda::dtype_size(t.dtype));
    const int64_t start = static_cast<const uint8_t*>(t.data) - mem.buffers[buf].base;
    kda::fuzz::for_each_offset(t, [&](int64_t offset) {
      const int64_t first = start + offset * elem;
      kda::fuzz::poison(mem.buffers[buf].base + first, t.dtype, 1);
      for (int64_t i = 0; i < elem; ++i) writable[buf][static_cast<size_t>(first + i)] = true;
    });
  }
  const auto before = snapshot(mem);
  const kda::Status status = kda::run(c.problem, backend);
  KDA_FUZZ_CHECK(status.ok(), "%s failed on a validated problem: %s\n%s", name,
                 status.message.c_str(), c.problem.describe().c_str());
  for (size_t b = 0; b < mem.buffers.size(); ++b) {
    for (size_t i = 0; i < before[b].size(); ++i) {
      KDA_FUZZ_CHECK(writable[b][i] || before[b][i] == mem.buffers[b].base[i],
                     "%s modified byte %zu of buffer %zu, which no output element covers", name, i,
                     b);
    }
  }
  const bool finite = finite_inputs_expected(c);
  std::vector<std::vector<double>> outputs;
  for (int s = 0; s < Op::kNumSlots; ++s) {
    if (!Op::kSlots[s].is_output) continue;
    const TensorView& t = c.problem.*(Op::kSlots[s].member);
    std::vector<double> values;
    kda::fuzz::for_each_offset(t, [&](int64_t offset) {
      const auto* element = static_cast<const uint8_t*>(t.data) + offset * kda::dtype_size(t.dtype);
      KDA_FUZZ_CHECK(!kda::fuzz::is_poison(element, t.dtype), "%s left an element of %s unwritten",
                     name, Op::kSlots[s].name);
      const double value = kda::load_double(t, offset);
      KDA_FUZZ_CHECK(!finite || std::isfinite(value),
                     "%s wrote a non-finite %s (%g at element %lld) from finite inputs\n%s", name,
                     Op::kSlots[s].name, value, static_cast<long long>(offset),
                     c.problem.describe().c_str());
      values.push_back(value);
    });
    outputs.push_back(std::move(values));
  }
  return outputs;
}

// cpu (float32) against cpu-ref (float64): loose, because rounding of f16/bf16 outputs and
// float32 accumulation are expected; this catches layout and indexing mistakes, not precision.
// (Range loops, not operator[]: this file is coverage-instrumented, and its out-of-line copy of
// std::vector<double>::operator[] would be the one the linker gives cpu-ref's inner loops too.)
void compare_backends(const std::vector<std::vector<double>>& cpu,
                      const std::vector<std::vector<double>>& ref) {
  auto cpu_output = cpu.begin();
  int output = 0;
  for (const std::vector<double>& want : ref) {
    double diff = 0.0, norm = 0.0;
    auto got = cpu_output->begin();
    for (const double r : want) {
      diff += (*got - r) * (*got - r);
      norm += r * r;
      ++got;
    }
    const double count = std::max<double>(1.0, static_cast<double>(want.size()));
    const double rms_diff = std::sqrt(diff / count), rms_ref = std::sqrt(norm / count);
    KDA_FUZZ_CHECK(rms_diff <= 2e-2 * rms_ref + 1e-3,
                   "cpu and cpu-ref disagree on output %d: rms(diff) %g, rms(ref) %g", output,
                   rms_diff, rms_ref);
    ++cpu_output;
    ++output;
  }
}

// One input of operator Op: decode, place, fill, then check both faces and both backends.
template <typename Op>
void fuzz_one(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  Case<Op> c = decode_case<Op>(fdp);
  Memory mem(Op::kNumSlots);
  bool all_backed = true;
  place(c, mem, all_backed);
  fill_inputs(c, mem);
  if (std::getenv("KDA_FUZZ_VERBOSE") != nullptr) print_case(c, mem);
  // Valid by construction: nothing broken on purpose and no reason to reject found.
  const bool must_accept = !c.perturbed && c.must_reject.empty();

  // The C face first: it guards enum values, so it must answer even where the C++ face may not.
  const kda_status c_status = Op::c_validate(c.problem);
  const std::string c_message = kda_last_error();

  const auto before = snapshot(mem);
  const kda::Status status = c.problem.validate();
  KDA_FUZZ_CHECK(status.ok() || status.code == kda::StatusCode::invalid_argument,
                 "validate() returned code %d: %s", static_cast<int>(status.code),
                 status.message.c_str());
  KDA_FUZZ_CHECK(
      status.ok() || (!status.message.empty() && status.message.find('\n') == std::string::npos),
      "validate() message is empty or not one line: '%s'", status.message.c_str());
  KDA_FUZZ_CHECK(!status.ok() || c.must_reject.empty(),
                 "validate() accepted an invalid problem (%s)\n%s", c.must_reject.c_str(),
                 c.problem.describe().c_str());
  KDA_FUZZ_CHECK(status.ok() || !must_accept, "validate() rejected a valid problem: %s\n%s",
                 status.message.c_str(), c.problem.describe().c_str());
  KDA_FUZZ_CHECK(c_status == static_cast<kda_status>(status.code),
                 "%s says %d (%s), validate() says %d (%s)", Op::kCValidate, c_status,
                 c_message.c_str(), static_cast<int>(status.code), status.message.c_str());
  KDA_FUZZ_CHECK(c.garbage_enum || c_message == status.message,
                 "%s message '%s' differs from validate() message '%s'", Op::kCValidate,
                 c_message.c_str(), status.message.c_str());

  if (!status.ok()) {
    // No partial outputs on error: run() refuses with the same message and touches nothing.
    const kda::Status r = kda::run(c.problem, kda::Backend::cpu_ref);
    KDA_FUZZ_CHECK(r.code == status.code && r.message == status.message,
                   "run() and validate() disagree: '%s' vs '%s'", r.message.c_str(),
                   status.message.c_str());
    const auto after = snapshot(mem);
    KDA_FUZZ_CHECK(before == after, "a rejected run() changed a buffer");
    return;
  }
  if (c.problem.q.device.type != kda::DeviceType::cpu) {
    // Device-resident tensors (PROT_NONE here): the CPU backends refuse without reading them.
    const kda::Status r = kda::run(c.problem, kda::Backend::cpu);
    KDA_FUZZ_CHECK(r.code == kda::StatusCode::invalid_argument,
                   "cpu backend accepted device tensors: %s", r.message.c_str());
    return;
  }
  if (!all_backed) return;  // valid, but spanning more than the harness allocates
  const auto ref = run_and_check(c, mem, kda::Backend::cpu_ref);
  const auto cpu = run_and_check(c, mem, kda::Backend::cpu);
  if (finite_inputs_expected(c)) compare_backends(cpu, ref);
}

// The operators, in the order the first input byte picks them (its value modulo their count):
// append new ones, so that the committed corpus (first bytes 0 and 1) keeps its meaning.
constexpr void (*kOperators[])(const uint8_t*, size_t) = {fuzz_one<WyDqkg>, fuzz_one<Intra>,
                                                          fuzz_one<Epilogue>, fuzz_one<Prep>};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    kOperators[0](data, 0);
    return 0;
  }
  kOperators[data[0] % std::size(kOperators)](data + 1, size - 1);
  return 0;
}
