/* chunk_bwd_intra (fla's chunk_kda_bwd_intra): its tensor arguments, once (see kda/args.h).
 * Contract: SPEC-chunk-bwd-intra.md. X is float16, bfloat16 or float32. Each output is its
 * incoming input plus the intra-chunk terms. */
#ifndef KDA_OPS_CHUNK_BWD_INTRA_ARGS_H_
#define KDA_OPS_CHUNK_BWD_INTRA_ARGS_H_

#include "kda/args.h"

#define KDA_CHUNK_BWD_INTRA_ARGS(X)                                                       \
  X(q, "q", KDA_ARG_INPUT, 4, "[B, T, H, K] X")                                           \
  X(k, "k", KDA_ARG_INPUT, 4, "[B, T, H, K] X")                                           \
  X(g, "g", KDA_ARG_INPUT, 4, "[B, T, HV, K] float32, chunk-local cumulative gate, log2") \
  X(beta, "beta", KDA_ARG_INPUT, 3, "[B, T, HV] X or float32")                            \
  X(dAqk, "dAqk", KDA_ARG_INPUT, 4, "[B, T, HV, BT] float32, lower-inclusive")            \
  X(dAkk, "dAkk", KDA_ARG_INPUT, 4, "[B, T, HV, BT] float32, lower-inclusive")            \
  X(dq, "dq", KDA_ARG_INPUT, 4, "[B, T, HV, K] float32, incoming")                        \
  X(dk, "dk", KDA_ARG_INPUT, 4, "[B, T, HV, K] float32, incoming")                        \
  X(db, "db", KDA_ARG_INPUT, 3, "[B, T, HV] float32, incoming")                           \
  X(dg, "dg", KDA_ARG_INPUT, 4, "[B, T, HV, K] float32, incoming")                        \
  X(cu_seqlens, "cu_seqlens", KDA_ARG_OPTIONAL, 1, "[N+1] int32 or int64; then B == 1")   \
  X(chunk_indices, "chunk_indices", KDA_ARG_OPTIONAL, 2, "[NT, 2] int32 or int64")        \
  X(dq_out, "out.dq", KDA_ARG_OUTPUT, 4, "[B, T, HV, K] float32")                         \
  X(dk_out, "out.dk", KDA_ARG_OUTPUT, 4, "[B, T, HV, K] float32")                         \
  X(db_out, "out.db", KDA_ARG_OUTPUT, 3, "[B, T, HV] float32")                            \
  X(dg_out, "out.dg", KDA_ARG_OUTPUT, 4, "[B, T, HV, K] float32")

#endif /* KDA_OPS_CHUNK_BWD_INTRA_ARGS_H_ */
