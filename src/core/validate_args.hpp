#pragma once
// The validation rules every operator shares, written once: each check returns a Status whose
// message names the argument ("argument 'q': expected ...") and never reads past what the
// descriptor proves exists. Operators' validate() functions compose them with their own rules.

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kda/args.hpp"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda::validation {

Status fail(const char* name, const std::string& what);
std::string shape_str(const std::vector<int64_t>& shape);
std::string shape_str(const TensorView& t);

// Present, rank as expected, known dtype and device, extents and strides >= 0 with a span that
// fits in 64 bits, data non-null unless empty, aligned to the element size.
Status check_view(const char* name, const TensorView& t, int rank);
// The first expected.size() extents equal `expected` (`symbolic` names them, e.g. "[B, T, H, K]").
// Nothing is allocated unless the check fails (it runs on every call).
Status check_shape(const char* name, const TensorView& t, std::span<const int64_t> expected,
                   const char* symbolic);
inline Status check_shape(const char* name, const TensorView& t,
                          std::initializer_list<int64_t> expected, const char* symbolic) {
  return check_shape(name, t, std::span<const int64_t>(expected.begin(), expected.size()),
                     symbolic);
}
Status check_dtype(const char* name, const TensorView& t, std::initializer_list<DType> allowed,
                   const char* why);
// The same check and message, with `why` a callable that builds the wording (a std::string) only
// when the check fails.
template <typename Why, std::enable_if_t<std::is_invocable_v<Why&>, int> = 0>
Status check_dtype(const char* name, const TensorView& t, std::initializer_list<DType> allowed,
                   Why&& why) {
  for (DType d : allowed) {
    if (t.dtype == d) return Status::Ok();
  }
  const std::string text = why();
  return check_dtype(name, t, allowed, text.c_str());
}
// `name` in an X dtype (float16, bfloat16 or float32): the operators' first dtype rule.
Status check_x_dtype(const char* name, const TensorView& t);

// Every argument of a table: required ones present with their ranks, optional ones (when given)
// with theirs, chunk_indices only with cu_seqlens, and all of them on `anchor`'s device (the
// table's first row, anchor_of: messages name it).
template <typename P>
Status check_args_present_on_one_device(const P& problem, std::span<const Arg<P>> args,
                                        const TensorView& anchor);
// Every input and optional tensor (when given) in the dtype its row's type names, against X (the
// anchor's dtype: the table's first row, q or k): of_q is X, of_q_or_f32 X or float32, of_h h's
// dtype (`h`; null when no row is of_h), f32 float32; x (the anchor, checked first by
// check_x_dtype), index and output rows are left to others.
template <typename P>
Status check_arg_dtypes(const P& problem, std::span<const Arg<P>> args, DType x,
                        const TensorView* h = nullptr);
// Outputs contiguous, disjoint from each other and from every other argument.
template <typename P>
Status check_outputs(const P& problem, std::span<const Arg<P>> args);

// cu_seqlens / chunk_indices (already checked by check_view): int32 or int64, B == 1 with
// cu_seqlens, [NT, 2] chunk_indices. With host-resident cu_seqlens its entries are walked (first
// 0, non-decreasing, last == T) and NT counted; host-resident chunk_indices must equal the
// indices derived from cu_seqlens. With device-resident cu_seqlens only the shapes are checked:
// NT is chunk_indices' row count when given, else `device_nt_bound` (contents are the kernels'
// to check, see docs/design.md).
struct ChunkCount {
  int64_t NT = 0;        // chunks: per batch row (fixed length) or in total (varlen)
  int64_t num_seqs = 0;  // B when fixed length, len(cu_seqlens) - 1 when varlen
};
Status check_chunks(const TensorView& cu_seqlens, const TensorView& chunk_indices, int64_t B,
                    int64_t T, int64_t chunk_size, int64_t device_nt_bound, ChunkCount* out);

// A state scan's output extents that no input has (chunk_bwd_dhu's and chunk_fwd_h's named
// extents), as far as the inputs say without a device read: "chunks" (NT: ceil(T / BT) per batch
// row, or the chunks of every sequence: chunk_indices' rows, else counted from host cu_seqlens),
// "seqs" (B, or len(cu_seqlens) - 1), "state_rows" and "state_cols" (K, V, or V, K with
// state_v_first), with B, T, K from `anchor` [B, T, H, K] and V from `values` [B, T, HV, V]. -1
// where the inputs do not say (device-resident cu_seqlens and no chunk_indices, a rank other
// than the table's, chunks that check_chunks refuses) and for any other name.
int64_t state_scan_extent(std::string_view name, const TensorView& anchor, const TensorView& values,
                          const TensorView& cu_seqlens, const TensorView& chunk_indices,
                          int64_t chunk_size, bool state_v_first);

// chunk_size in {16, 32, 64}.
Status check_chunk_size(int64_t chunk_size);

// A float option that the backends other than cpu-ref use in float32 (scale, lower_bound): none,
// or finite with a magnitude float32 holds (past it, float32 makes it inf, and zero products NaN).
Status check_float32_option(const char* name, const std::optional<double>& value);

// The per-chunk states h and dh: [B (1 when varlen), NT, HV, K, V], or [.., V, K] when
// state_v_first.
Status check_states(const TensorView& h, const TensorView& dh, int64_t B, int64_t NT, int64_t HV,
                    int64_t K, int64_t V, bool varlen, bool state_v_first);

// K and V: 1..256 (fla's front end caps both at 256).
inline constexpr int64_t kMaxHeadDim = 256;

// `name` [B, T, H, K] with K in 1..kMaxHeadDim and H >= 1 (an operator's q, or chunk_fwd_h's
// k): sets dims' B, T, H, K.
template <typename Dims>
Status check_keys_shape(const char* name, const TensorView& t, Dims* dims) {
  dims->B = t.shape[0];
  dims->T = t.shape[1];
  dims->H = t.shape[2];
  dims->K = t.shape[3];
  if (dims->K < 1 || dims->K > kMaxHeadDim) {
    return fail(name,
                "expected head dim K (last extent) in 1..256, got " + std::to_string(dims->K));
  }
  if (dims->H < 1) return fail(name, "expected at least one head (H >= 1), got H = 0");
  return Status::Ok();
}

// A KDA layer's activation switches as an operator that applies them takes them (the epilogue,
// the backward's first pass): A_log [HV], dt_bias [HV * K] and lower_bound (negative, a float32)
// only with the gate in the kernel, A_log required there unless lower_bound is set;
// allow_neg_eigval only with the beta sigmoid.
Status check_layer_activations(bool gate_in_kernel, const TensorView& A_log,
                               const TensorView& dt_bias, const std::optional<double>& lower_bound,
                               bool beta_sigmoid, bool allow_neg_eigval, int64_t HV, int64_t K);

// q [B, T, H, K] (check_keys_shape), and k of q's shape: sets dims' B, T, H, K.
template <typename Dims>
Status check_queries_keys(const TensorView& q, const TensorView& k, Dims* dims) {
  if (Status s = check_keys_shape("q", q, dims); !s.ok()) return s;
  return check_shape("k", k, {dims->B, dims->T, dims->H, dims->K}, "[B, T, H, K] (from q)");
}

// v [B, T, HV, V] with V in 1..kMaxHeadDim and HV a positive multiple of H, the tensors `like_v`
// of v's shape, g [B, T, HV, K] and beta [B, T, HV]: sets dims' HV and V (B, T, H, K set).
template <typename Dims>
Status check_values_and_gates(
    const TensorView& v, std::initializer_list<std::pair<const char*, const TensorView*>> like_v,
    const TensorView& g, const TensorView& beta, Dims* dims) {
  const Dims& d = *dims;
  dims->HV = v.shape[2];
  dims->V = v.shape[3];
  if (Status s = check_shape("v", v, {d.B, d.T}, "[B, T, ...] (B, T from q)"); !s.ok()) return s;
  if (d.V < 1 || d.V > kMaxHeadDim) {
    return fail("v", "expected head dim V (last extent) in 1..256, got " + std::to_string(d.V));
  }
  if (d.HV < 1 || d.HV % d.H != 0) {
    return fail("v", "expected value heads HV (dim 2) to be a positive multiple of H = " +
                         std::to_string(d.H) + ", got HV = " + std::to_string(d.HV));
  }
  for (auto [name, view] : like_v) {
    if (Status s = check_shape(name, *view, {d.B, d.T, d.HV, d.V}, "[B, T, HV, V] (from q and v)");
        !s.ok()) {
      return s;
    }
  }
  if (Status s = check_shape("g", g, {d.B, d.T, d.HV, d.K}, "[B, T, HV, K] (from q and v)");
      !s.ok()) {
    return s;
  }
  return check_shape("beta", beta, {d.B, d.T, d.HV}, "[B, T, HV] (from q and v)");
}

// The state scans' sizes after the anchor's (dims holds B, T, H, K from `anchor`): w [B, T, HV,
// K] with HV a positive multiple of H, the `values` [B, T, HV, V] with V in 1..kMaxHeadDim (the
// first sets V), the optional gates g [B, T, HV] and gk [B, T, HV, K], chunk_size. Sets dims'
// HV, V, BT. Messages name the anchor where the extents come from.
template <typename Dims>
Status check_scan_sizes(const char* anchor, const TensorView& w,
                        std::initializer_list<std::pair<const char*, const TensorView*>> values,
                        const TensorView& g, const TensorView& gk, int64_t chunk_size, Dims* dims) {
  Dims& d = *dims;
  const auto [first, first_view] = *values.begin();
  d.HV = w.shape[2];
  d.V = first_view->shape[3];
  const std::string from = std::string("(from ") + anchor + ", w)";
  if (d.HV < 1 || d.HV % d.H != 0) {
    return fail("w", "expected value heads HV (dim 2) to be a positive multiple of H = " +
                         std::to_string(d.H) + ", got HV = " + std::to_string(d.HV));
  }
  const std::string w_from = std::string("[B, T, HV, K] (B, T, K from ") + anchor + ")";
  if (Status s = check_shape("w", w, {d.B, d.T, d.HV, d.K}, w_from.c_str()); !s.ok()) return s;
  if (d.V < 1 || d.V > kMaxHeadDim) {
    return fail(first, "expected head dim V (last extent) in 1..256, got " + std::to_string(d.V));
  }
  const std::string values_from = "[B, T, HV, V] " + from;
  for (auto [name, view] : values) {
    if (Status s = check_shape(name, *view, {d.B, d.T, d.HV, d.V}, values_from.c_str()); !s.ok())
      return s;
  }
  if (!g.empty_arg()) {
    const std::string g_from = "[B, T, HV] " + from;
    if (Status s = check_shape("g", g, {d.B, d.T, d.HV}, g_from.c_str()); !s.ok()) return s;
  }
  if (!gk.empty_arg()) {
    const std::string gk_from = "[B, T, HV, K] " + from;
    if (Status s = check_shape("gk", gk, {d.B, d.T, d.HV, d.K}, gk_from.c_str()); !s.ok()) return s;
  }
  if (Status s = check_chunk_size(chunk_size); !s.ok()) return s;
  d.BT = chunk_size;
  return Status::Ok();
}

// The state scans' chunks and per-sequence states: fixed length or cu_seqlens, where the per-chunk
// states' chunk count (`states`: their name) must be known before the run, so device-resident
// cu_seqlens come with chunk_indices; then each given state of `seq_states` [N, HV, K, V]
// ([.., V, K] with state_v_first). Sets dims' NT and num_seqs.
template <typename Dims>
Status check_scan_chunks_and_states(
    const TensorView& cu_seqlens, const TensorView& chunk_indices, const char* states,
    std::initializer_list<std::pair<const char*, const TensorView*>> seq_states, bool state_v_first,
    Dims* dims) {
  Dims& d = *dims;
  if (d.varlen && cu_seqlens.device.type != DeviceType::cpu && chunk_indices.empty_arg()) {
    return fail("chunk_indices", std::string("required with device-resident cu_seqlens: its rows "
                                             "are ") +
                                     states + "'s chunk count NT");
  }
  ChunkCount chunks;
  if (Status s = check_chunks(cu_seqlens, chunk_indices, d.B, d.T, d.BT, -1, &chunks); !s.ok())
    return s;
  d.NT = chunks.NT;
  d.num_seqs = chunks.num_seqs;
  const std::array<int64_t, 4> state = state_v_first
                                           ? std::array<int64_t, 4>{d.num_seqs, d.HV, d.V, d.K}
                                           : std::array<int64_t, 4>{d.num_seqs, d.HV, d.K, d.V};
  const char* symbolic =
      state_v_first ? "[N, HV, V, K] (state_v_first; N sequences)" : "[N, HV, K, V] (N sequences)";
  for (auto [name, view] : seq_states) {
    if (view->empty_arg()) continue;
    if (Status s = check_shape(name, *view, state, symbolic); !s.ok()) return s;
  }
  return Status::Ok();
}

// The chunks (fixed length or cu_seqlens; with device-resident cu_seqlens and no chunk_indices
// the chunk count is h's), then h and dh against them: the rules of the operators with per-chunk
// states. Sets dims->NT and dims->num_seqs (dims holds B, T, BT, HV, K, V and varlen).
template <typename Dims>
Status check_chunks_and_states(const TensorView& cu_seqlens, const TensorView& chunk_indices,
                               const TensorView& h, const TensorView& dh, bool state_v_first,
                               Dims* dims) {
  ChunkCount chunks;
  if (Status s =
          check_chunks(cu_seqlens, chunk_indices, dims->B, dims->T, dims->BT, h.shape[1], &chunks);
      !s.ok()) {
    return s;
  }
  dims->NT = chunks.NT;
  dims->num_seqs = chunks.num_seqs;
  return check_states(h, dh, dims->B, dims->NT, dims->HV, dims->K, dims->V, dims->varlen,
                      state_v_first);
}

// The chunks of an operator with no per-chunk tensor (fixed length or cu_seqlens): with
// device-resident cu_seqlens and no chunk_indices nothing on the host says how many chunks
// there are, so the kernel runs over an upper bound (every sequence adds at most one short
// chunk) and skips the rest. Sets dims->NT and dims->num_seqs (dims holds B, T, BT, varlen).
template <typename Dims>
Status check_chunks_bounded(const TensorView& cu_seqlens, const TensorView& chunk_indices,
                            Dims* dims) {
  const int64_t num_seqs_bound = dims->varlen ? std::max<int64_t>(cu_seqlens.shape[0] - 1, 0) : 0;
  const int64_t nt_bound = std::min(dims->T, dims->T / dims->BT + num_seqs_bound);
  ChunkCount chunks;
  if (Status s =
          check_chunks(cu_seqlens, chunk_indices, dims->B, dims->T, dims->BT, nt_bound, &chunks);
      !s.ok()) {
    return s;
  }
  dims->NT = chunks.NT;
  dims->num_seqs = chunks.num_seqs;
  return Status::Ok();
}

// Per-token chunk matrices [B, T, HV, BT] (Akk, Aqk, their gradients): the last extent is the
// chunk size, the rest from the problem's dims (`symbolic` names them, e.g. "[B, T, HV, BT]
// (from q, v)"). Nothing is allocated unless a check fails.
template <typename Dims>
Status check_chunk_matrices(
    std::initializer_list<std::pair<const char*, const TensorView*>> matrices, const char* symbolic,
    const Dims& d) {
  for (auto [name, view] : matrices) {
    if (view->shape[3] != d.BT) {
      return fail(name, "expected last extent == chunk_size = " + std::to_string(d.BT) + ", got " +
                            name + ".shape[-1] = " + std::to_string(view->shape[3]));
    }
    if (Status s = check_shape(name, *view, {d.B, d.T, d.HV, d.BT}, symbolic); !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

// One line per argument and option, for describe().
template <typename P>
std::string describe_args(const P& problem, std::span<const Arg<P>> args);

}  // namespace kda::validation

#include "core/validate_args_impl.hpp"
