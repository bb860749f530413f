/* chunk_bwd_wy_dqkg (fla's chunk_kda_bwd_wy_dqkg_fused): its arguments, once (see kda/args.h).
 * Contract: SPEC.md. X is float16, bfloat16 or float32. */
#ifndef KDA_OPS_CHUNK_BWD_WY_DQKG_ARGS_H_
#define KDA_OPS_CHUNK_BWD_WY_DQKG_ARGS_H_

#include "kda/args.h"

/* clang-format off */
#define KDA_CHUNK_BWD_WY_DQKG_ARGS(X)                                                                      \
  X(q, "q", KDA_ARG_INPUT, KDA_TYPE_X, 4, "", "[B, T, H, K] X")                                            \
  X(k, "k", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, H, K] X")                                         \
  X(v, "v", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X")                                        \
  X(v_new, "v_new", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X")                                \
  X(g, "g", KDA_ARG_INPUT, KDA_TYPE_F32, 4, "", "[B, T, HV, K] float32, cumulative gate in log2 space")    \
  X(beta, "beta", KDA_ARG_INPUT, KDA_TYPE_OF_Q_OR_F32, 3, "", "[B, T, HV] X or float32")                   \
  X(A, "A", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, BT] X")                                       \
  X(h, "h", KDA_ARG_INPUT, KDA_TYPE_OF_Q_OR_F32, 5, "",                                                    \
    "[B, NT, HV, K, V] ([.., V, K] if state_v_first) float32 or X")                                        \
  X(do_, "do", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X")                                     \
  X(dh, "dh", KDA_ARG_INPUT, KDA_TYPE_OF_H, 5, "", "like h")                                               \
  X(dv, "dv", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X, gradient w.r.t. v_new")               \
  X(scale, "scale", KDA_ARG_OPTION, KDA_TYPE_FLOAT_OR_NONE, 0, "none", "none: K ** -0.5")                  \
  X(cu_seqlens, "cu_seqlens", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 1, "", "[N+1] int32 or int64; then B == 1") \
  X(chunk_size, "chunk_size", KDA_ARG_OPTION, KDA_TYPE_INT, 0, "64", "BT: 16, 32 or 64")                   \
  X(chunk_indices, "chunk_indices", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 2, "", "[NT, 2] int32 or int64")     \
  X(state_v_first, "state_v_first", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false",                            \
    "h, dh are [.., V, K] (fla's transpose_state_layout)")                                                 \
  X(dq, "out.dq", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 v.2 q.3", "[B, T, HV, K] float32")             \
  X(dk, "out.dk", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 v.2 q.3", "[B, T, HV, K] float32")             \
  X(dv_out, "out.dv_out", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "q.0 q.1 v.2 v.3", "[B, T, HV, V] X")          \
  X(db, "out.db", KDA_ARG_OUTPUT, KDA_TYPE_F32, 3, "q.0 q.1 v.2", "[B, T, HV] float32")                    \
  X(dg, "out.dg", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 v.2 q.3", "[B, T, HV, K] float32")             \
  X(dA, "out.dA", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 v.2 A.3", "[B, T, HV, BT] float32")
/* clang-format on */

#endif /* KDA_OPS_CHUNK_BWD_WY_DQKG_ARGS_H_ */
