// ChunkBwdDhuProblem::validate(): every rule of the reverse scan's contract (the table's rows,
// docs/design.md "The state scans"), written once; each failure names the argument and what was
// expected. And named_extent(): the outputs' extents no input has.

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "core/validate_args.hpp"
#include "kda/ops/chunk_bwd_dhu.hpp"

namespace kda {

int64_t ChunkBwdDhuProblem::named_extent(std::string_view name) const {
  return validation::state_scan_extent(name, q, do_, cu_seqlens, chunk_indices, chunk_size,
                                       state_v_first);
}

Status ChunkBwdDhuProblem::validate(ChunkBwdDhuDims* out) const {
  using namespace validation;
  ChunkBwdDhuDims d;
  // --- presence, ranks, one device ------------------------------------------------------
  if (Status s = check_args_present_on_one_device(*this, args(), q); !s.ok()) return s;
  d.varlen = !cu_seqlens.empty_arg();
  d.use_g = !g.empty_arg();
  d.use_gk = !gk.empty_arg();

  // --- dtypes: by each row's type ------------------------------------------------------
  if (Status s = check_x_dtype("q", q); !s.ok()) return s;
  d.x_dtype = q.dtype;
  if (Status s = check_arg_dtypes(*this, args(), q.dtype); !s.ok()) return s;

  // --- sizes ----------------------------------------------------------------------------
  if (Status s = check_queries_keys(q, k, &d); !s.ok()) return s;
  d.HV = w.shape[2];
  d.V = do_.shape[3];
  if (d.HV < 1 || d.HV % d.H != 0) {
    return fail("w", "expected value heads HV (dim 2) to be a positive multiple of H = " +
                         std::to_string(d.H) + ", got HV = " + std::to_string(d.HV));
  }
  if (Status s = check_shape("w", w, {d.B, d.T, d.HV, d.K}, "[B, T, HV, K] (B, T, K from q)");
      !s.ok()) {
    return s;
  }
  if (d.V < 1 || d.V > kMaxHeadDim) {
    return fail("do", "expected head dim V (last extent) in 1..256, got " + std::to_string(d.V));
  }
  for (auto [name, view] : {std::pair{"do", &do_}, {"dv", &dv}}) {
    if (Status s = check_shape(name, *view, {d.B, d.T, d.HV, d.V}, "[B, T, HV, V] (from q, w)");
        !s.ok()) {
      return s;
    }
  }
  if (d.use_g) {
    if (Status s = check_shape("g", g, {d.B, d.T, d.HV}, "[B, T, HV] (from q, w)"); !s.ok())
      return s;
  }
  if (d.use_gk) {
    if (Status s = check_shape("gk", gk, {d.B, d.T, d.HV, d.K}, "[B, T, HV, K] (from q, w)");
        !s.ok()) {
      return s;
    }
  }
  if (Status s = check_chunk_size(chunk_size); !s.ok()) return s;
  d.BT = chunk_size;
  if (Status s = check_float32_option("scale", scale); !s.ok()) return s;
  d.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d.K));

  // --- chunks: fixed length or cu_seqlens. dh's chunk count must be known before the run, so
  //     device-resident cu_seqlens come with chunk_indices. -------------------------------
  if (d.varlen && cu_seqlens.device.type != DeviceType::cpu && chunk_indices.empty_arg()) {
    return fail("chunk_indices",
                "required with device-resident cu_seqlens: its rows are dh's chunk count NT");
  }
  ChunkCount chunks;
  if (Status s = check_chunks(cu_seqlens, chunk_indices, d.B, d.T, d.BT, -1, &chunks); !s.ok())
    return s;
  d.NT = chunks.NT;
  d.num_seqs = chunks.num_seqs;

  // --- the states: h0 and dht [N, HV, K, V] ([.., V, K] with state_v_first) -----------
  const std::array<int64_t, 4> state = state_v_first
                                           ? std::array<int64_t, 4>{d.num_seqs, d.HV, d.V, d.K}
                                           : std::array<int64_t, 4>{d.num_seqs, d.HV, d.K, d.V};
  const char* symbolic =
      state_v_first ? "[N, HV, V, K] (state_v_first; N sequences)" : "[N, HV, K, V] (N sequences)";
  for (auto [name, view] : {std::pair{"h0", &h0}, {"dht", &dht}}) {
    if (view->empty_arg()) continue;
    if (Status s = check_shape(name, *view, state, symbolic); !s.ok()) return s;
  }

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  if (Status s = check_outputs(*this, args()); !s.ok()) return s;
  if (out) *out = d;
  return Status::Ok();
}

}  // namespace kda
