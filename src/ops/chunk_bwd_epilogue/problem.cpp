// ChunkBwdEpilogueProblem::validate(): every rule of the epilogue's contract (the table's rows,
// docs/design.md), written once; each failure names the argument and what was expected.

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include "core/validate_args.hpp"
#include "kda/ops/chunk_bwd_epilogue.hpp"

namespace kda {

Status ChunkBwdEpilogueProblem::validate(ChunkBwdEpilogueDims* out) const {
  using namespace validation;
  ChunkBwdEpilogueDims d;
  // --- presence, ranks, one device ------------------------------------------------------
  if (Status s = check_args_present_on_one_device(*this, args(), q); !s.ok()) return s;
  d.varlen = !cu_seqlens.empty_arg();

  // --- dtypes: by each row's type ------------------------------------------------------
  if (Status s = check_x_dtype("q", q); !s.ok()) return s;
  const DType x = q.dtype;
  d.x_dtype = x;
  d.h_dtype = h.dtype;
  if (Status s = check_arg_dtypes(*this, args(), x, &h); !s.ok()) return s;

  // --- sizes ----------------------------------------------------------------------------
  if (Status s = check_queries_keys(q, k, &d); !s.ok()) return s;
  if (Status s =
          check_values_and_gates(v, {{"v_new", &v_new}, {"dv", &dv}, {"do", &do_}}, g, beta, &d);
      !s.ok()) {
    return s;
  }
  if (Status s = check_chunk_size(chunk_size); !s.ok()) return s;
  d.BT = chunk_size;
  if (Status s = check_chunk_matrices({{"A", &A}}, "[B, T, HV, BT] (from q, v)", d); !s.ok())
    return s;

  // --- the gate's and beta's options ----------------------------------------------------
  if (Status s = check_layer_activations(use_gate_in_kernel, A_log, dt_bias, lower_bound,
                                         use_beta_sigmoid_in_kernel, allow_neg_eigval, d.HV, d.K);
      !s.ok()) {
    return s;
  }
  if (Status s = check_float32_option("scale", scale); !s.ok()) return s;
  d.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d.K));

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  if (Status s = check_outputs(*this, args()); !s.ok()) return s;

  // --- chunks, and h, dh against them -----------------------------------------------------
  if (Status s = check_chunks_and_states(cu_seqlens, chunk_indices, h, dh, state_v_first, &d);
      !s.ok()) {
    return s;
  }
  if (out) *out = d;
  return Status::Ok();
}

}  // namespace kda
