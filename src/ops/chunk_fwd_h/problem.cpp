// ChunkFwdHProblem::validate(): every rule of the forward scan's contract (the table's rows,
// docs/design.md "The state scans"), written once; each failure names the argument and what was
// expected. And named_extent(): the outputs' extents no input has.

#include <string>
#include <string_view>

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
  if (Status s = check_keys_shape("k", k, &d); !s.ok()) return s;
  if (Status s = check_scan_sizes("k", w, {{"u", &u}}, g, gk, chunk_size, &d); !s.ok()) return s;

  // --- chunks, and initial_state [N, HV, K, V] ([.., V, K] with state_v_first) -----------
  if (Status s = check_scan_chunks_and_states(
          cu_seqlens, chunk_indices, "h", {{"initial_state", &initial_state}}, state_v_first, &d);
      !s.ok()) {
    return s;
  }

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  if (Status s = check_outputs(*this, args()); !s.ok()) return s;
  if (out) *out = d;
  return Status::Ok();
}

}  // namespace kda
