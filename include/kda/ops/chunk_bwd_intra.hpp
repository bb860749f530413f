#pragma once
// chunk_bwd_intra: fla's chunk_kda_bwd_intra, the gradients that flow through the intra-chunk
// matrices Aqk and Akk back to q, k, beta and g (contract: SPEC-chunk-bwd-intra.md).

#include <cstdint>
#include <span>
#include <string>

#include "kda/args.hpp"
#include "kda/backend.hpp"
#include "kda/ops/chunk_bwd_intra_args.h"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Sizes derived from a valid problem.
struct ChunkBwdIntraDims {
  int64_t B = 0;         // batch rows (1 when varlen)
  int64_t T = 0;         // tokens per batch row
  int64_t H = 0;         // query/key heads
  int64_t HV = 0;        // value heads; HV % H == 0
  int64_t K = 0;         // head dim, 1..256
  int64_t BT = 0;        // chunk size: 16, 32 or 64
  int64_t NT = 0;        // chunks: per batch row (fixed length) or in total (varlen); with
                         // device-resident cu_seqlens and no chunk_indices an upper bound
  int64_t num_seqs = 0;  // sequences (B when fixed length, len(cu_seqlens) - 1 when varlen)
  bool varlen = false;
  DType x_dtype = DType::f32;     // X: q, k
  DType beta_dtype = DType::f32;  // X or f32
};

struct ChunkBwdIntraProblem {
  // One member per row of KDA_CHUNK_BWD_INTRA_ARGS (shapes, dtypes and defaults there):
  //   inputs    q k g beta dAqk dAkk, and the incoming gradients dq dk db dg (read only)
  //   optional  cu_seqlens chunk_indices (leave default-constructed to omit)
  //   options   chunk_size; safe_gate (fla's algorithm switch: changes nothing mathematically,
  //             SPEC, so backends may ignore it)
  //   outputs   dq_out dk_out db_out dg_out: incoming + intra-chunk terms (written in full;
  //             contiguous, overlapping nothing)
  KDA_PROBLEM_TABLE_MEMBERS(CHUNK_BWD_INTRA, ChunkBwdIntra)

  Status validate(ChunkBwdIntraDims* dims = nullptr) const;
};

}  // namespace kda
