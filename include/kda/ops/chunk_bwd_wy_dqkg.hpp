#pragma once
// chunk_bwd_wy_dqkg: fla's chunk_kda_bwd_wy_dqkg_fused, the chunk backward's WY step that turns
// chunk states and their gradients into dq, dk, dv, db, dg, dA (contract: SPEC.md).

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kda/args.hpp"
#include "kda/backend.hpp"
#include "kda/ops/chunk_bwd_wy_dqkg_args.h"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Sizes derived from a valid problem.
struct ChunkBwdWyDqkgDims {
  int64_t B = 0;         // batch rows (1 when varlen)
  int64_t T = 0;         // tokens per batch row
  int64_t H = 0;         // query/key heads
  int64_t HV = 0;        // value heads; HV % H == 0
  int64_t K = 0;         // key head dim, 1..256
  int64_t V = 0;         // value head dim, 1..256
  int64_t BT = 0;        // chunk size: 16, 32 or 64
  int64_t NT = 0;        // chunks: per batch row (fixed length) or in total (varlen)
  int64_t num_seqs = 0;  // sequences (B when fixed length, len(cu_seqlens) - 1 when varlen)
  bool varlen = false;
  DType x_dtype = DType::f32;     // X: q, k, v, v_new, do, dv, A (and dv_out)
  DType h_dtype = DType::f32;     // h, dh: f32 or X
  DType beta_dtype = DType::f32;  // X or f32
};

struct ChunkBwdWyDqkgProblem {
  // One member per row of KDA_CHUNK_BWD_WY_DQKG_ARGS (shapes, dtypes and defaults there):
  //   inputs    q k v v_new g beta A h do_ dh dv (read only; dv is the gradient w.r.t. v_new)
  //   optional  cu_seqlens chunk_indices (leave default-constructed to omit)
  //   options   scale (nullopt: K ** -0.5), chunk_size, state_v_first
  //   outputs   dq dk dv_out db dg dA (written in full; contiguous, overlapping nothing)
  KDA_PROBLEM_TABLE_MEMBERS(CHUNK_BWD_WY_DQKG, ChunkBwdWyDqkg)

  // Checks every rule of SPEC.md; on failure the message names the argument and what was
  // expected. Index tensors on the host are checked element by element; on a GPU their contents
  // are checked by the kernel (see docs/design.md). Fills *dims when given and valid.
  Status validate(ChunkBwdWyDqkgDims* dims = nullptr) const;
  double effective_scale() const;
};

}  // namespace kda
