// ChunkBwdPrepProblem::validate(): every rule of the backward's first pass (the table's rows,
// docs/design.md), written once; each failure names the argument and what was expected. The
// gate's and beta's option rules are the epilogue's (validation::check_layer_activations).

#include <algorithm>
#include <string>
#include <utility>

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
  for (auto [name, view] : {std::pair{"A", &A}, {"Aqk", &Aqk}}) {
    if (view->shape[3] != chunk_size) {
      return fail(name, "expected last extent == chunk_size = " + std::to_string(chunk_size) +
                            ", got " + name + ".shape[-1] = " + std::to_string(view->shape[3]));
    }
    if (Status s = check_shape(name, *view, {d.B, d.T, d.HV, d.BT}, "[B, T, HV, BT] (from q, v)");
        !s.ok()) {
      return s;
    }
  }

  // --- the gate's and beta's options ----------------------------------------------------
  if (Status s = check_layer_activations(use_gate_in_kernel, A_log, dt_bias, lower_bound,
                                         use_beta_sigmoid_in_kernel, allow_neg_eigval, d.HV, d.K);
      !s.ok()) {
    return s;
  }

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  if (Status s = check_outputs(*this, args()); !s.ok()) return s;

  // --- chunks: fixed length or cu_seqlens. No tensor is per chunk: with device-resident
  //     cu_seqlens and no chunk_indices the kernel runs over an upper bound (every sequence
  //     adds at most one short chunk) and skips the rest, as chunk_bwd_intra's does. -------
  const int64_t num_seqs_bound = d.varlen ? std::max<int64_t>(cu_seqlens.shape[0] - 1, 0) : 0;
  const int64_t nt_bound = std::min(d.T, d.T / d.BT + num_seqs_bound);
  ChunkCount chunks;
  if (Status s = check_chunks(cu_seqlens, chunk_indices, d.B, d.T, d.BT, nt_bound, &chunks);
      !s.ok()) {
    return s;
  }
  d.NT = chunks.NT;
  d.num_seqs = chunks.num_seqs;
  if (out) *out = d;
  return Status::Ok();
}

}  // namespace kda
