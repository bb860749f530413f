/* chunk_bwd_intra (fla's chunk_kda_bwd_intra): its arguments, once (see kda/args.h).
 * Contract: SPEC-chunk-bwd-intra.md. X is float16, bfloat16 or float32. Each output is its
 * incoming input plus the intra-chunk terms. */
#ifndef KDA_OPS_CHUNK_BWD_INTRA_ARGS_H_
#define KDA_OPS_CHUNK_BWD_INTRA_ARGS_H_

#include "kda/args.h"

/* clang-format off */
#define KDA_CHUNK_BWD_INTRA_ARGS(X)                                                                          \
  X(q, "q", KDA_ARG_INPUT, KDA_TYPE_X, 4, "", "[B, T, H, K] X")                                              \
  X(k, "k", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, H, K] X")                                           \
  X(g, "g", KDA_ARG_INPUT, KDA_TYPE_F32, 4, "", "[B, T, HV, K] float32, chunk-local cumulative gate, log2")  \
  X(beta, "beta", KDA_ARG_INPUT, KDA_TYPE_OF_Q_OR_F32, 3, "", "[B, T, HV] X or float32")                     \
  X(dAqk, "dAqk", KDA_ARG_INPUT, KDA_TYPE_F32, 4, "", "[B, T, HV, BT] float32, lower-inclusive")             \
  X(dAkk, "dAkk", KDA_ARG_INPUT, KDA_TYPE_F32, 4, "", "[B, T, HV, BT] float32, lower-inclusive")             \
  X(dq, "dq", KDA_ARG_INPUT, KDA_TYPE_F32, 4, "", "[B, T, HV, K] float32, incoming")                         \
  X(dk, "dk", KDA_ARG_INPUT, KDA_TYPE_F32, 4, "", "[B, T, HV, K] float32, incoming")                         \
  X(db, "db", KDA_ARG_INPUT, KDA_TYPE_F32, 3, "", "[B, T, HV] float32, incoming")                            \
  X(dg, "dg", KDA_ARG_INPUT, KDA_TYPE_F32, 4, "", "[B, T, HV, K] float32, incoming")                         \
  X(cu_seqlens, "cu_seqlens", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 1, "", "[N+1] int32 or int64; then B == 1")  \
  X(chunk_indices, "chunk_indices", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 2, "", "[NT, 2] int32 or int64")       \
  X(chunk_size, "chunk_size", KDA_ARG_OPTION, KDA_TYPE_INT, 0, "64", "BT: 16, 32 or 64")                     \
  X(safe_gate, "safe_gate", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false",                                      \
    "fla's algorithm switch: changes nothing mathematically")                                                \
  X(dq_out, "out.dq", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 g.2 q.3", "[B, T, HV, K] float32")           \
  X(dk_out, "out.dk", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 g.2 q.3", "[B, T, HV, K] float32")           \
  X(db_out, "out.db", KDA_ARG_OUTPUT, KDA_TYPE_F32, 3, "q.0 q.1 g.2", "[B, T, HV] float32")                  \
  X(dg_out, "out.dg", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 g.2 q.3", "[B, T, HV, K] float32")
/* clang-format on */

#endif /* KDA_OPS_CHUNK_BWD_INTRA_ARGS_H_ */
