#pragma once
// The epilogue's math for one (chunk, value head) in float64: SPEC.md's steps 1-12 (the WY
// terms), dAqk = scale · do · v_newᵀ, SPEC-chunk-bwd-intra.md's steps 1-8 and the chunk-local
// reverse cumsum of dg, on the activated values with natural-log decays (exp(G) stands for the
// operators' exp2 of a log2 G). Shared by the operator's cpu-ref and the layer's chunked
// reference (src/ops/chunk_kda/chunk_reference.cpp), which checks it against the golden files.

#include "core/reference_matrix.hpp"

namespace kda::detail::epilogue {

using reference::Matrix;

struct ChunkInputs {
  Matrix Q, Kk;   // L x K after l2norm
  Matrix Vv, dO;  // L x V
  Matrix beta;    // L x 1 activated
  Matrix G;       // L x K cumulative natural-log gate within the chunk
  Matrix Akk;     // L x L, the forward's (I + M)⁻¹, used as stored (SPEC.md)
  Matrix S;       // K x V the state at the chunk's start (fla's h)
  Matrix dS;      // K x V the gradient by the state at its end (fla's dh)
  Matrix Vn;      // L x V v_new
  Matrix dV;      // L x V the reverse scan's dv (by v_new)
};

struct ChunkGradients {
  Matrix dq, dk;  // L x K by the normalised q, k
  Matrix dv;      // L x V
  Matrix dbeta;   // L x 1 by the activated beta
  Matrix dgate;   // L x K by each token's natural-log decay (the reverse cumsum done)
};

ChunkGradients epilogue_chunk(const ChunkInputs& in, double scale);

}  // namespace kda::detail::epilogue
