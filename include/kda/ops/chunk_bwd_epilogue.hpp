#pragma once
// chunk_bwd_epilogue: the last pass of a KDA layer's backward. From the layer's raw inputs, the
// forward's Akk and the state scans' h, dh, v_new and dv it writes the gradients of the layer's
// raw inputs in one pass per (chunk, head) (docs/design.md, "The fused backward epilogue"; its
// float64 judge is src/ops/chunk_kda/chunk_reference.cpp, checked against ../shared/golden-kda).

#include <cstdint>
#include <span>
#include <string>

#include "kda/args.hpp"
#include "kda/backend.hpp"
#include "kda/ops/chunk_bwd_epilogue_args.h"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Sizes derived from a valid problem.
struct ChunkBwdEpilogueDims {
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
  DType x_dtype = DType::f32;  // X: q, k, v, A, v_new, dv, do
  DType h_dtype = DType::f32;  // h, dh: X or float32
  double scale = 0.0;          // resolved: K ** -0.5 when the option is none
};

struct ChunkBwdEpilogueProblem {
  // One member per row of KDA_CHUNK_BWD_EPILOGUE_ARGS (shapes, dtypes and defaults there):
  //   inputs    q k v g beta (the layer's raw inputs), A (Akk), h dh v_new dv (the scans'), do
  //   optional  A_log dt_bias (only with use_gate_in_kernel), cu_seqlens chunk_indices
  //   options   scale chunk_size state_v_first and the layer's activation switches
  //   outputs   dq dk dv_out dg dbeta dA_log ddt_bias (written in full; contiguous, overlapping
  //             nothing)
  KDA_PROBLEM_TABLE_MEMBERS(CHUNK_BWD_EPILOGUE, ChunkBwdEpilogue)

  Status validate(ChunkBwdEpilogueDims* dims = nullptr) const;
};

}  // namespace kda
