// ChunkFwdHProblem::validate(): every rule of the forward scan's contract (the table's rows,
// docs/design.md "The state scans"), written once; each failure names the argument and what was
// expected. And named_extent(): the outputs' extents no input has.

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "core/validate_args.hpp"
#include "kda/ops/chunk_fwd_h.hpp"

namespace kda {

int64_t ChunkFwdHProblem::named_extent(std::string_view name) const {
  return validation::state_scan_extent(name, k, u, cu_seqlens, chunk_indices, chunk_size,
                                       state_v_first);
}

Status ChunkFwdHProblem::validate(ChunkFwdHDims* out) const {
  using namespace validation;
  ChunkFwdHDims d;
  // --- presence, ranks, one device (k's) ------------------------------------------------
  if (Status s = check_args_present_on_one_device(*this, args(), k); !s.ok()) return s;
  d.varlen = !cu_seqlens.empty_arg();
  d.use_g = !g.empty_arg();
  d.use_gk = !gk.empty_arg();

  // --- dtypes: k sets X, the other rows by their types ---------------------------------
  if (Status s = check_x_dtype("k", k); !s.ok()) return s;
  d.x_dtype = k.dtype;
  if (Status s = check_arg_dtypes(*this, args(), k.dtype); !s.ok()) return s;

  // --- sizes: B, T, H, K from k; HV from w; V from u --------------------------------------
  d.B = k.shape[0];
  d.T = k.shape[1];
  d.H = k.shape[2];
  d.K = k.shape[3];
  if (d.K < 1 || d.K > kMaxHeadDim) {
    return fail("k", "expected head dim K (last extent) in 1..256, got " + std::to_string(d.K));
  }
  if (d.H < 1) return fail("k", "expected at least one head (H >= 1), got H = 0");
  d.HV = w.shape[2];
  d.V = u.shape[3];
  if (d.HV < 1 || d.HV % d.H != 0) {
    return fail("w", "expected value heads HV (dim 2) to be a positive multiple of H = " +
                         std::to_string(d.H) + ", got HV = " + std::to_string(d.HV));
  }
  if (Status s = check_shape("w", w, {d.B, d.T, d.HV, d.K}, "[B, T, HV, K] (B, T, K from k)");
      !s.ok()) {
    return s;
  }
  if (d.V < 1 || d.V > kMaxHeadDim) {
    return fail("u", "expected head dim V (last extent) in 1..256, got " + std::to_string(d.V));
  }
  if (Status s = check_shape("u", u, {d.B, d.T, d.HV, d.V}, "[B, T, HV, V] (from k, w)"); !s.ok())
    return s;
  if (d.use_g) {
    if (Status s = check_shape("g", g, {d.B, d.T, d.HV}, "[B, T, HV] (from k, w)"); !s.ok())
      return s;
  }
  if (d.use_gk) {
    if (Status s = check_shape("gk", gk, {d.B, d.T, d.HV, d.K}, "[B, T, HV, K] (from k, w)");
        !s.ok()) {
      return s;
    }
  }
  if (Status s = check_chunk_size(chunk_size); !s.ok()) return s;
  d.BT = chunk_size;

  // --- chunks: fixed length or cu_seqlens. h's chunk count must be known before the run, so
  //     device-resident cu_seqlens come with chunk_indices. --------------------------------
  if (d.varlen && cu_seqlens.device.type != DeviceType::cpu && chunk_indices.empty_arg()) {
    return fail("chunk_indices",
                "required with device-resident cu_seqlens: its rows are h's chunk count NT");
  }
  ChunkCount chunks;
  if (Status s = check_chunks(cu_seqlens, chunk_indices, d.B, d.T, d.BT, -1, &chunks); !s.ok())
    return s;
  d.NT = chunks.NT;
  d.num_seqs = chunks.num_seqs;

  // --- initial_state [N, HV, K, V] ([.., V, K] with state_v_first) -------------------------
  if (!initial_state.empty_arg()) {
    const std::array<int64_t, 4> state = state_v_first
                                             ? std::array<int64_t, 4>{d.num_seqs, d.HV, d.V, d.K}
                                             : std::array<int64_t, 4>{d.num_seqs, d.HV, d.K, d.V};
    const char* symbolic = state_v_first ? "[N, HV, V, K] (state_v_first; N sequences)"
                                         : "[N, HV, K, V] (N sequences)";
    if (Status s = check_shape("initial_state", initial_state, state, symbolic); !s.ok()) return s;
  }

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  if (Status s = check_outputs(*this, args()); !s.ok()) return s;
  if (out) *out = d;
  return Status::Ok();
}

}  // namespace kda
