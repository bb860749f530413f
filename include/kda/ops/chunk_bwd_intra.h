/* C ABI of chunk_bwd_intra (fla's chunk_kda_bwd_intra; contract: SPEC-chunk-bwd-intra.md). */
#ifndef KDA_OPS_CHUNK_BWD_INTRA_H_
#define KDA_OPS_CHUNK_BWD_INTRA_H_

#include "kda/kda.h"
#include "kda/ops/chunk_bwd_intra_args.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kda_chunk_bwd_intra_problem {
  int32_t abi_version; /* = KDA_ABI_VERSION */
  int32_t safe_gate;   /* fla's algorithm switch: changes nothing mathematically */
  int64_t chunk_size;
  /* the tensors, in the order of KDA_CHUNK_BWD_INTRA_ARGS */
  KDA_CHUNK_BWD_INTRA_ARGS(KDA_DECLARE_C_TENSOR)
} kda_chunk_bwd_intra_problem;

/* Checks `problem` against the contract without running anything. */
KDA_API kda_status kda_chunk_bwd_intra_validate(const kda_chunk_bwd_intra_problem* problem);
/* Validates and runs on `backend` with `kernel` (KDA_KERNEL_*); `stream` is a cudaStream_t for
 * KDA_BACKEND_CUDA (NULL: the default stream) and ignored otherwise. */
KDA_API kda_status kda_chunk_bwd_intra_run(const kda_chunk_bwd_intra_problem* problem,
                                           int32_t backend, int32_t kernel, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KDA_OPS_CHUNK_BWD_INTRA_H_ */
