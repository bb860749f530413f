/* chunk_fwd_h (fla's chunk_gated_delta_rule_fwd_h): the forward state scan of a gated delta
 * rule's chunked forward, its arguments once (see kda/args.h). Per sequence and value head it
 * walks the chunks from the first to the last, carrying the state S (K x V, float32) from
 * initial_state (or 0): it writes the state at every chunk's start (h), the new values
 * u - w S (v_new) and the state after the last chunk (final_state). For KDA, k is fla's
 * kg = k * 2^(g_last - g) and gk the chunk-local log2 cumsum of the decay (docs/design.md, "The
 * state scans"). X is float16, bfloat16 or float32, k's dtype. */
#ifndef KDA_OPS_CHUNK_FWD_H_ARGS_H_
#define KDA_OPS_CHUNK_FWD_H_ARGS_H_

#include "kda/args.h"

/* clang-format off */
#define KDA_CHUNK_FWD_H_ARGS(X)                                                                              \
  X(k, "k", KDA_ARG_INPUT, KDA_TYPE_X, 4, "", "[B, T, H, K] X (KDA: kg)")                                     \
  X(w, "w", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, K] X")                                           \
  X(u, "u", KDA_ARG_INPUT, KDA_TYPE_OF_Q, 4, "", "[B, T, HV, V] X")                                           \
  X(g, "g", KDA_ARG_OPTIONAL, KDA_TYPE_F32, 3, "", "[B, T, HV] float32: chunk-local log2 cumsum, per head") \
  X(gk, "gk", KDA_ARG_OPTIONAL, KDA_TYPE_F32, 4, "", "[B, T, HV, K] float32: the same per key channel")      \
  X(initial_state, "initial_state", KDA_ARG_OPTIONAL, KDA_TYPE_OF_Q_OR_F32, 4, "",                           \
    "[N, HV, K, V] ([.., V, K] if state_v_first) X or float32: the state before the first chunk")           \
  X(output_final_state, "output_final_state", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false",                     \
    "fla's switch; final_state is always written")                                                           \
  X(chunk_size, "chunk_size", KDA_ARG_OPTION, KDA_TYPE_INT, 0, "64", "BT: 16, 32 or 64")                     \
  X(save_new_value, "save_new_value", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "true",                              \
    "fla's switch; v_new is always written")                                                                 \
  X(state_v_first, "state_v_first", KDA_ARG_OPTION, KDA_TYPE_BOOL, 0, "false", "states are [.., V, K]")      \
  X(cu_seqlens, "cu_seqlens", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 1, "", "[N+1] int32 or int64; then B == 1")   \
  X(chunk_indices, "chunk_indices", KDA_ARG_OPTIONAL, KDA_TYPE_INDEX, 2, "",                                 \
    "[NT, 2] int32 or int64 (required with device-resident cu_seqlens: it sizes h)")                         \
  X(h, "out.h", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 5, "k.0 chunks w.2 state_rows state_cols",                    \
    "[B, NT, HV, K, V] ([.., V, K] if state_v_first) X: the state at each chunk's start")                    \
  X(v_new, "out.v_new", KDA_ARG_OUTPUT, KDA_TYPE_OF_Q, 4, "u.0 u.1 u.2 u.3",                                 \
    "[B, T, HV, V] X: u - w S, S the state at the token's chunk's start")                                    \
  X(final_state, "out.final_state", KDA_ARG_OUTPUT, KDA_TYPE_F32, 4, "seqs w.2 state_rows state_cols",       \
    "[N, HV, K, V] ([.., V, K] if state_v_first) float32: the state after the last chunk")
/* clang-format on */

#endif /* KDA_OPS_CHUNK_FWD_H_ARGS_H_ */
