/* chunk_bwd_epilogue: the last pass of a KDA layer's backward, once per (chunk, head): its
 * arguments, once (see kda/args.h). It takes the layer's raw inputs, the forward's Akk and what
 * the two state scans produce (h, dh, v_new, dv), and gives the gradients of the layer's raw
 * inputs: the WY and intra-chunk terms (SPEC.md, SPEC-chunk-bwd-intra.md), dAqk, the reverse
 * cumsum of dg, the gate's, beta's and l2norm's backward, GVA's sum (docs/design.md, "The fused
 * backward epilogue"). X is float16, bfloat16 or float32. */
#ifndef KDA_OPS_CHUNK_BWD_EPILOGUE_ARGS_H_
#define KDA_OPS_CHUNK_BWD_EPILOGUE_ARGS_H_

#include "kda/args.h"

/* clang-format off */
#define KDA_CHUNK_BWD_EPILOGUE_ARGS(X)                                                                       \
  X(q, "q", KDA_ARG_INPUT, KDA_TYPE_X, 4, "", "[B, T, H, K] X, before l2norm")                               \
  X(k, "k", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, H, K] X, before l2norm")                            \
  X(v, "v", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X")                                          \
  X(g, "g", KDA_ARG_INPUT, KDA_TYPE_OF_Q_OR_F32, 4, "",                                                      \
    "[B, T, HV, K] X or float32: per-token natural-log decay, or the gate's raw input")                       \
  X(beta, "beta", KDA_ARG_INPUT, KDA_TYPE_OF_Q_OR_F32, 3, "", "[B, T, HV] X or float32, or its logits")      \
  X(A, "A", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, BT] X: the forward's Akk")                       \
  X(h, "h", KDA_ARG_INPUT, KDA_TYPE_OF_Q_OR_F32, 5, "",                                                      \
    "[B, NT, HV, K, V] ([.., V, K] if state_v_first) float32 or X: the state at each chunk's start")          \
  X(dh, "dh", KDA_ARG_INPUT, KDA_TYPE_OF_H, 5, "", "like h: the gradient by the state at each chunk's end")  \
  X(v_new, "v_new", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X: the forward scan's v_new")         \
  X(dv, "dv", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X: the reverse scan's dv (by v_new)")       \
  X(do_, "do", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X")                                       \
  X(A_log, "A_log", KDA_ARG_OPTIONAL, KDA_TYPE_F32, 1, "", "[HV] float32 (gate in the kernel)")               \
  X(dt_bias, "dt_bias", KDA_ARG_OPTIONAL, KDA_TYPE_F32, 1, "", "[HV * K] float32 (gate in the kernel)")       \
  X(scale, "scale", KDA_ARG_OPTION, KDA_TYPE_FLOAT_OR_NONE, 0, "none", "none: K ** -0.5")                    \
  X(cu_seqlens, "cu_seqlens", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 1, "", "[N+1] int32 or int64; then B == 1")   \
  X(chunk_size, "chunk_size", KDA_ARG_OPTION, KDA_TYPE_INT, 0, "64", "BT: 16, 32 or 64")                     \
  X(chunk_indices, "chunk_indices", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 2, "", "[NT, 2] int32 or int64")       \
  X(state_v_first, "state_v_first", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false", "h, dh are [.., V, K]")        \
  X(use_qk_l2norm_in_kernel, "use_qk_l2norm_in_kernel", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false",          \
    "q, k are l2-normalised in the layer")                                                                    \
  X(use_gate_in_kernel, "use_gate_in_kernel", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false",                    \
    "g is the gate's raw input: -exp(A_log) softplus(g + dt_bias), or with lower_bound L sigmoid(..)")        \
  X(use_beta_sigmoid_in_kernel, "use_beta_sigmoid_in_kernel", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false",    \
    "beta holds logits: sigmoid(beta)")                                                                       \
  X(allow_neg_eigval, "allow_neg_eigval", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false",                        \
    "with the beta sigmoid: 2 sigmoid(beta)")                                                                 \
  X(lower_bound, "lower_bound", KDA_ARG_OPTION, KDA_TYPE_FLOAT_OR_NONE, 0, "none",                          \
    "the bounded gate's L (gate in the kernel)")                                                              \
  X(dq, "out.dq", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "q.0 q.1 q.2 q.3", "[B, T, H, K] X")                      \
  X(dk, "out.dk", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "q.0 q.1 q.2 q.3", "[B, T, H, K] X")                      \
  X(dv_out, "out.dv", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "q.0 q.1 v.2 v.3", "[B, T, HV, V] X")                 \
  X(dg, "out.dg", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 v.2 q.3", "[B, T, HV, K] float32, by g")          \
  X(dbeta, "out.dbeta", KDA_ARG_OUTPUT, KDA_TYPE_F32, 3, "q.0 q.1 v.2", "[B, T, HV] float32, by beta")        \
  X(dA_log, "out.dA_log", KDA_ARG_OUTPUT, KDA_TYPE_F32, 1, "v.2",                                             \
    "[HV] float32 (0 where A_log does not enter the layer)")                                                  \
  X(ddt_bias, "out.ddt_bias", KDA_ARG_OUTPUT, KDA_TYPE_F32, 2, "v.2 q.3",                                     \
    "[HV, K] float32 (0 where dt_bias does not enter the layer)")
/* clang-format on */

#endif /* KDA_OPS_CHUNK_BWD_EPILOGUE_ARGS_H_ */
