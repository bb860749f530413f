/* chunk_bwd_prep: the first pass of a KDA layer's backward, once per (chunk, value head): its
 * arguments, once (see kda/args.h). From the layer's raw inputs, the forward's Akk and Aqk and
 * the output's gradient it gives what the two state scans read: the chunk-local log2 cumsum of
 * the decay (gk), w, u, qg, kg (fla's recompute_w_u_fwd) and the intra-chunk dv = Aqk^T do (fla's
 * chunk_kda_bwd_dAv), with the gate's activation, the beta sigmoid and l2norm applied on the way
 * (docs/design.md, "The backward's first pass"). X is float16, bfloat16 or float32. */
#ifndef KDA_OPS_CHUNK_BWD_PREP_ARGS_H_
#define KDA_OPS_CHUNK_BWD_PREP_ARGS_H_

#include "kda/args.h"

/* clang-format off */
#define KDA_CHUNK_BWD_PREP_ARGS(X)                                                                           \
  X(q, "q", KDA_ARG_INPUT, KDA_TYPE_X, 4, "", "[B, T, H, K] X, before l2norm")                               \
  X(k, "k", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, H, K] X, before l2norm")                            \
  X(v, "v", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X")                                          \
  X(g, "g", KDA_ARG_INPUT, KDA_TYPE_OF_Q_OR_F32, 4, "",                                                      \
    "[B, T, HV, K] X or float32: per-token natural-log decay, or the gate's raw input")                       \
  X(beta, "beta", KDA_ARG_INPUT, KDA_TYPE_OF_Q_OR_F32, 3, "", "[B, T, HV] X or float32, or its logits")      \
  X(A, "A", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "",                                                             \
    "[B, T, HV, BT] X: the forward's Akk (read on and below the diagonal, inside the chunk)")                 \
  X(Aqk, "Aqk", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "",                                                         \
    "[B, T, HV, BT] X: the forward's Aqk, scale included (read like A)")                                      \
  X(do_, "do", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X: the gradient by the output o")         \
  X(A_log, "A_log", KDA_ARG_OPTIONAL, KDA_TYPE_F32, 1, "", "[HV] float32 (gate in the kernel)")               \
  X(dt_bias, "dt_bias", KDA_ARG_OPTIONAL, KDA_TYPE_F32, 1, "", "[HV * K] float32 (gate in the kernel)")       \
  X(cu_seqlens, "cu_seqlens", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 1, "", "[N+1] int32 or int64; then B == 1")   \
  X(chunk_size, "chunk_size", KDA_ARG_OPTION, KDA_TYPE_INT, 0, "64", "BT: 16, 32 or 64")                     \
  X(chunk_indices, "chunk_indices", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 2, "", "[NT, 2] int32 or int64")       \
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
  X(gk, "out.gk", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "q.0 q.1 v.2 q.3",                                         \
    "[B, T, HV, K] float32: the decay's chunk-local cumsum, log2")                                           \
  X(w, "out.w", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "q.0 q.1 v.2 q.3", "[B, T, HV, K] X: A (beta k 2^gk)")      \
  X(u, "out.u", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "v.0 v.1 v.2 v.3", "[B, T, HV, V] X: A (beta v)")           \
  X(qg, "out.qg", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "q.0 q.1 v.2 q.3", "[B, T, HV, K] X: q 2^gk")             \
  X(kg, "out.kg", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "q.0 q.1 v.2 q.3",                                        \
    "[B, T, HV, K] X: k 2^(gk[last] - gk), last the chunk's last token")                                      \
  X(dv, "out.dv", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "v.0 v.1 v.2 v.3",                                        \
    "[B, T, HV, V] X: Aqk^T do, the intra-chunk dv")
/* clang-format on */

#endif /* KDA_OPS_CHUNK_BWD_PREP_ARGS_H_ */
