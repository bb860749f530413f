// ChunkBwdWyDqkgProblem: its argument table, validate() (every rule of SPEC.md, written once;
// each failure names the argument and what was expected) and describe().

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "core/validate_args.hpp"
#include "kda/ops/chunk_bwd_wy_dqkg.hpp"

namespace kda {

namespace {

using P = ChunkBwdWyDqkgProblem;

}  // namespace

double ChunkBwdWyDqkgProblem::effective_scale() const {
  if (scale) return *scale;
  const double K = k.rank == 4 ? static_cast<double>(k.shape[3]) : 1.0;
  return 1.0 / std::sqrt(K > 0 ? K : 1.0);
}

Status ChunkBwdWyDqkgProblem::validate(ChunkBwdWyDqkgDims* out) const {
  using namespace validation;
  ChunkBwdWyDqkgDims d;
  // --- presence, ranks, one device ------------------------------------------------------
  if (Status s = check_args_present_on_one_device(*this, args(), q); !s.ok()) return s;
  d.varlen = !cu_seqlens.empty_arg();

  // --- dtypes ---------------------------------------------------------------------------
  if (Status s = check_x_dtype("q", q); !s.ok()) return s;
  d.x_dtype = q.dtype;
  // The wording of the X rules, built only when a check fails.
  const auto same_as_q = [&] { return std::string(dtype_name(d.x_dtype)) + " (the dtype of q)"; };
  for (auto [name, view] :
       {std::pair{"k", &k}, {"v", &v}, {"v_new", &v_new}, {"A", &A}, {"do", &do_}, {"dv", &dv}}) {
    if (Status s = check_dtype(name, *view, {d.x_dtype}, same_as_q); !s.ok()) return s;
  }
  if (Status s = check_dtype("g", g, {DType::f32}, "float32"); !s.ok()) return s;
  // beta, h and dh take X or float32: one choice, not "float32 or float32", when X is float32.
  const auto x_or_f32 = [&] {
    return d.x_dtype == DType::f32 ? same_as_q() : same_as_q() + " or float32";
  };
  if (Status s = check_dtype("beta", beta, {d.x_dtype, DType::f32}, x_or_f32); !s.ok()) {
    return s;
  }
  d.beta_dtype = beta.dtype;
  if (Status s = check_dtype("h", h, {DType::f32, d.x_dtype}, x_or_f32); !s.ok()) {
    return s;
  }
  if (dh.dtype != h.dtype) {
    return fail("dh", "expected the dtype of h (" + std::string(dtype_name(h.dtype)) + "), got " +
                          std::string(dtype_name(dh.dtype)));
  }
  d.h_dtype = h.dtype;

  // --- sizes ----------------------------------------------------------------------------
  if (Status s = check_queries_keys(q, k, &d); !s.ok()) return s;
  if (Status s =
          check_values_and_gates(v, {{"v_new", &v_new}, {"do", &do_}, {"dv", &dv}}, g, beta, &d);
      !s.ok()) {
    return s;
  }
  if (Status s = check_chunk_size(chunk_size); !s.ok()) return s;
  d.BT = chunk_size;
  if (A.shape[3] != chunk_size) {
    return fail("A", "expected last extent == chunk_size = " + std::to_string(chunk_size) +
                         ", got A.shape[-1] = " + std::to_string(A.shape[3]));
  }
  if (Status s = check_shape("A", A, {d.B, d.T, d.HV, d.BT}, "[B, T, HV, BT] (from q, v)");
      !s.ok()) {
    return s;
  }
  if (Status s = check_float32_option("scale", scale); !s.ok()) return s;

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
