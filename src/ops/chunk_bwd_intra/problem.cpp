// ChunkBwdIntraProblem: its argument table, validate() (every rule of SPEC-chunk-bwd-intra.md,
// written once; each failure names the argument and what was expected) and describe().

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "core/validate_args.hpp"
#include "kda/ops/chunk_bwd_intra.hpp"

namespace kda {

namespace {

using P = ChunkBwdIntraProblem;

}  // namespace

Status ChunkBwdIntraProblem::validate(ChunkBwdIntraDims* out) const {
  using namespace validation;
  ChunkBwdIntraDims d;
  // --- presence, ranks, one device ------------------------------------------------------
  if (Status s = check_args_present_on_one_device(*this, args(), q); !s.ok()) return s;
  d.varlen = !cu_seqlens.empty_arg();

  // --- dtypes ---------------------------------------------------------------------------
  if (Status s = check_x_dtype("q", q); !s.ok()) return s;
  d.x_dtype = q.dtype;
  // The wording of the X rules, built only when a check fails.
  const auto same_as_q = [&] { return std::string(dtype_name(d.x_dtype)) + " (the dtype of q)"; };
  if (Status s = check_dtype("k", k, {d.x_dtype}, same_as_q); !s.ok()) return s;
  const auto x_or_f32 = [&] {
    return d.x_dtype == DType::f32 ? same_as_q() : same_as_q() + " or float32";
  };
  if (Status s = check_dtype("beta", beta, {d.x_dtype, DType::f32}, x_or_f32); !s.ok()) {
    return s;
  }
  d.beta_dtype = beta.dtype;
  for (const Arg<P>& a : args()) {
    const std::string_view name = a.info.name;
    if (name == "q" || name == "k" || name == "beta" || a.info.role != ArgRole::input) continue;
    if (Status s = check_dtype(a.info.name, a.of(*this), {DType::f32}, "float32"); !s.ok()) {
      return s;
    }
  }

  // --- sizes ----------------------------------------------------------------------------
  if (Status s = check_queries_keys(q, k, &d); !s.ok()) return s;
  d.HV = g.shape[2];
  if (Status s = check_shape("g", g, {d.B, d.T}, "[B, T, HV, K] (B, T from q)"); !s.ok()) {
    return s;
  }
  if (d.HV < 1 || d.HV % d.H != 0) {
    return fail("g", "expected value heads HV (dim 2) to be a positive multiple of H = " +
                         std::to_string(d.H) + ", got HV = " + std::to_string(d.HV));
  }
  const std::array<int64_t, 4> shape_gk{d.B, d.T, d.HV, d.K};
  for (auto [name, view] : {std::pair{"g", &g}, {"dq", &dq}, {"dk", &dk}, {"dg", &dg}}) {
    if (Status s = check_shape(name, *view, shape_gk, "[B, T, HV, K] (from q and g)"); !s.ok()) {
      return s;
    }
  }
  for (auto [name, view] : {std::pair{"beta", &beta}, {"db", &db}}) {
    if (Status s = check_shape(name, *view, {d.B, d.T, d.HV}, "[B, T, HV] (from q and g)");
        !s.ok()) {
      return s;
    }
  }
  if (Status s = check_chunk_size(chunk_size); !s.ok()) return s;
  d.BT = chunk_size;
  if (Status s =
          check_chunk_matrices({{"dAqk", &dAqk}, {"dAkk", &dAkk}}, "[B, T, HV, BT] (from q, g)", d);
      !s.ok()) {
    return s;
  }

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  if (Status s = check_outputs(*this, args()); !s.ok()) return s;

  // --- chunks: fixed length or cu_seqlens. With device-resident cu_seqlens and no
  //     chunk_indices the kernel runs over an upper bound of the chunks. -------------------
  if (Status s = check_chunks_bounded(cu_seqlens, chunk_indices, &d); !s.ok()) return s;
  if (out) *out = d;
  return Status::Ok();
}
}  // namespace kda
