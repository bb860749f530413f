// ChunkBwdEpilogueProblem::validate(): every rule of the epilogue's contract (the table's rows,
// docs/design.md), written once; each failure names the argument and what was expected.

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

#include "core/validate_args.hpp"
#include "kda/ops/chunk_bwd_epilogue.hpp"

namespace kda {

namespace {

using P = ChunkBwdEpilogueProblem;

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

}  // namespace

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
  if (A.shape[3] != chunk_size) {
    return fail("A", "expected last extent == chunk_size = " + std::to_string(chunk_size) +
                         ", got A.shape[-1] = " + std::to_string(A.shape[3]));
  }
  if (Status s = check_shape("A", A, {d.B, d.T, d.HV, d.BT}, "[B, T, HV, BT] (from q, v)");
      !s.ok()) {
    return s;
  }

  // --- the gate's and beta's options ----------------------------------------------------
  if (!use_gate_in_kernel) {
    // Without the gate in the kernel these do not enter the layer: refusing them keeps a
    // caller from believing they did.
    for (auto [name, view] : {std::pair{"A_log", &A_log}, {"dt_bias", &dt_bias}}) {
      if (!view->empty_arg()) {
        return fail(name,
                    "given without use_gate_in_kernel; it enters the layer only with the "
                    "gate in the kernel");
      }
    }
    if (lower_bound) {
      return fail("lower_bound",
                  "given without use_gate_in_kernel; it bounds only the gate "
                  "computed in the kernel");
    }
  } else {
    if (A_log.empty_arg() && !lower_bound) {
      return fail("A_log", "required with use_gate_in_kernel unless lower_bound is set");
    }
    if (!A_log.empty_arg()) {
      if (Status s = check_shape("A_log", A_log, {d.HV}, "[HV] (from v)"); !s.ok()) return s;
    }
    if (!dt_bias.empty_arg()) {
      if (Status s = check_shape("dt_bias", dt_bias, {d.HV * d.K}, "[HV * K] (from v, q)");
          !s.ok()) {
        return s;
      }
    }
    if (lower_bound && !(*lower_bound < 0.0)) {
      return fail("lower_bound",
                  "expected a negative number (the gate lies in [lower_bound, 0)), "
                  "got " +
                      number(*lower_bound));
    }
  }
  if (allow_neg_eigval && !use_beta_sigmoid_in_kernel) {
    return fail("allow_neg_eigval", "takes effect only with use_beta_sigmoid_in_kernel");
  }
  if (Status s = check_float32_option("scale", scale); !s.ok()) return s;
  if (Status s = check_float32_option("lower_bound", lower_bound); !s.ok()) return s;
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
