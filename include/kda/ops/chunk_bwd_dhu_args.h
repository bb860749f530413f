/* chunk_bwd_dhu (fla's chunk_gated_delta_rule_bwd_dhu): the reverse state scan of a gated delta
 * rule's chunked backward, its arguments once (see kda/args.h). Per sequence and value head it
 * walks the chunks from the last to the first, carrying the gradient by the state: it writes that
 * gradient at every chunk's end (dh), the value gradient with the state's part added (dv2) and
 * the gradient by the initial state (dh0). For KDA, q and k are fla's qg = q * 2^g and
 * kg = k * 2^(g_last - g), gk the chunk-local log2 cumsum of the decay (docs/design.md, "The
 * state scans"). X is float16, bfloat16 or float32. */
#ifndef KDA_OPS_CHUNK_BWD_DHU_ARGS_H_
#define KDA_OPS_CHUNK_BWD_DHU_ARGS_H_

#include "kda/args.h"

/* clang-format off */
#define KDA_CHUNK_BWD_DHU_ARGS(X)                                                                            \
  X(q, "q", KDA_ARG_INPUT, KDA_TYPE_X, 4, "", "[B, T, H, K] X (KDA: qg)")                                     \
  X(k, "k", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, H, K] X (KDA: kg)")                                  \
  X(w, "w", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, K] X")                                           \
  X(do_, "do", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X")                                        \
  X(dv, "dv", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X: the intra-chunk value gradient")        \
  X(g, "g", KDA_ARG_OPTIONAL, KDA_TYPE_F32, 3, "", "[B, T, HV] float32: chunk-local log2 cumsum, per head") \
  X(gk, "gk", KDA_ARG_OPTIONAL, KDA_TYPE_F32, 4, "", "[B, T, HV, K] float32: the same per key channel")      \
  X(h0, "h0", KDA_ARG_OPTIONAL, KDA_TYPE_OF_Q_OR_F32, 4, "",                                                 \
    "[N, HV, K, V] ([.., V, K] if state_v_first) X or float32: the initial state (its shape only)")          \
  X(dht, "dht", KDA_ARG_OPTIONAL, KDA_TYPE_OF_Q_OR_F32, 4, "", "like h0: the gradient by the final state")  \
  X(scale, "scale", KDA_ARG_OPTION, KDA_TYPE_FLOAT_OR_NONE, 0, "none", "none: K ** -0.5")                    \
  X(state_v_first, "state_v_first", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false", "states are [.., V, K]")      \
  X(cu_seqlens, "cu_seqlens", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 1, "", "[N+1] int32 or int64; then B == 1")   \
  X(chunk_size, "chunk_size", KDA_ARG_OPTION, KDA_TYPE_INT, 0, "64", "BT: 16, 32 or 64")                     \
  X(chunk_indices, "chunk_indices", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 2, "",                                 \
    "[NT, 2] int32 or int64 (required with device-resident cu_seqlens: it sizes dh)")                        \
  X(dh, "out.dh", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 5, "q.0 chunks w.2 state_rows state_cols",                  \
    "[B, NT, HV, K, V] ([.., V, K] if state_v_first) X: the gradient by the state at each chunk's end")      \
  X(dh0, "out.dh0", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "seqs w.2 state_rows state_cols",                       \
    "[N, HV, K, V] ([.., V, K] if state_v_first) float32: the gradient by the initial state")                \
  X(dv2, "out.dv2", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "dv.0 dv.1 dv.2 dv.3",                                 \
    "[B, T, HV, V] X: dv plus the state's part")
/* clang-format on */

#endif /* KDA_OPS_CHUNK_BWD_DHU_ARGS_H_ */
