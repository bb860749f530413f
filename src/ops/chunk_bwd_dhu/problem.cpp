// ChunkBwdDhuProblem::validate(): every rule of the reverse scan's contract (the table's rows,
// docs/design.md "The state scans"), written once; each failure names the argument and what was
// expected. And named_extent(): the outputs' extents no input has.

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
  if (Status s = check_scan_sizes("q", w, {{"do", &do_}, {"dv", &dv}}, g, gk, chunk_size, &d);
      !s.ok()) {
    return s;
  }
  if (Status s = check_float32_option("scale", scale); !s.ok()) return s;
  d.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d.K));

  // --- chunks, and the states h0 and dht [N, HV, K, V] ([.., V, K] with state_v_first) ---
  if (Status s = check_scan_chunks_and_states(cu_seqlens, chunk_indices, "dh",
                                              {{"h0", &h0}, {"dht", &dht}}, state_v_first, &d);
      !s.ok()) {
    return s;
  }

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  if (Status s = check_outputs(*this, args()); !s.ok()) return s;
  if (out) *out = d;
  return Status::Ok();
}

}  // namespace kda
