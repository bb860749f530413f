// ChunkBwdPrepProblem::validate(): every rule of the backward's first pass (the table's rows,
// docs/design.md), written once; each failure names the argument and what was expected. The
// gate's and beta's option rules are the epilogue's (validation::check_layer_activations).

#include "core/validate_args.hpp"
#include "kda/ops/chunk_bwd_prep.hpp"

namespace kda {

Status ChunkBwdPrepProblem::validate(ChunkBwdPrepDims* out) const {
  using namespace validation;
  ChunkBwdPrepDims d;
  // --- presence, ranks, one device ------------------------------------------------------
  if (Status s = check_args_present_on_one_device(*this, args(), q); !s.ok()) return s;
  d.varlen = !cu_seqlens.empty_arg();

  // --- dtypes: by each row's type ------------------------------------------------------
  if (Status s = check_x_dtype("q", q); !s.ok()) return s;
  d.x_dtype = q.dtype;
  if (Status s = check_arg_dtypes(*this, args(), d.x_dtype); !s.ok()) return s;

  // --- sizes ----------------------------------------------------------------------------
  if (Status s = check_queries_keys(q, k, &d); !s.ok()) return s;
  if (Status s = check_values_and_gates(v, {{"do", &do_}}, g, beta, &d); !s.ok()) return s;
  if (Status s = check_chunk_size(chunk_size); !s.ok()) return s;
  d.BT = chunk_size;
  if (Status s = check_chunk_matrices({{"A", &A}, {"Aqk", &Aqk}}, "[B, T, HV, BT] (from q, v)", d);
      !s.ok()) {
    return s;
  }

  // --- the gate's and beta's options ----------------------------------------------------
  if (Status s = check_layer_activations(use_gate_in_kernel, A_log, dt_bias, lower_bound,
                                         use_beta_sigmoid_in_kernel, allow_neg_eigval, d.HV, d.K);
      !s.ok()) {
    return s;
  }

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  if (Status s = check_outputs(*this, args()); !s.ok()) return s;

  // --- chunks (no tensor is per chunk: an upper bound with device-resident cu_seqlens) ----
  if (Status s = check_chunks_bounded(cu_seqlens, chunk_indices, &d); !s.ok()) return s;
  if (out) *out = d;
  return Status::Ok();
}

}  // namespace kda
