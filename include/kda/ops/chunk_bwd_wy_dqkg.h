/* C ABI of chunk_bwd_wy_dqkg (fla's chunk_kda_bwd_wy_dqkg_fused; contract: SPEC.md). */
#ifndef KDA_OPS_CHUNK_BWD_WY_DQKG_H_
#define KDA_OPS_CHUNK_BWD_WY_DQKG_H_

#include "kda/kda.h"
#include "kda/ops/chunk_bwd_wy_dqkg_args.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kda_chunk_bwd_wy_dqkg_problem {
  int32_t abi_version; /* = KDA_ABI_VERSION */
  int32_t state_v_first;
  int64_t chunk_size;
  int32_t has_scale; /* 0: scale = K ** -0.5 */
  int32_t reserved0;
  double scale;
  /* the tensors, in the order of KDA_CHUNK_BWD_WY_DQKG_ARGS */
  KDA_CHUNK_BWD_WY_DQKG_ARGS(KDA_DECLARE_C_TENSOR)
} kda_chunk_bwd_wy_dqkg_problem;

/* Checks `problem` against the contract without running anything. */
KDA_API kda_status kda_chunk_bwd_wy_dqkg_validate(const kda_chunk_bwd_wy_dqkg_problem* problem);
/* Validates and runs on `backend` with `kernel` (KDA_KERNEL_*); `stream` is a cudaStream_t for
 * KDA_BACKEND_CUDA (NULL: the default stream) and ignored otherwise. */
KDA_API kda_status kda_chunk_bwd_wy_dqkg_run(const kda_chunk_bwd_wy_dqkg_problem* problem,
                                             int32_t backend, int32_t kernel, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KDA_OPS_CHUNK_BWD_WY_DQKG_H_ */
