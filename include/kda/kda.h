/* kda-kernels C ABI: a stable, C-callable face over the C++ core, for Python (ctypes) and other
 * languages. Every function returns a kda_status; on failure kda_last_error() holds a one-line
 * message (thread-local) naming the bad argument. Nothing here allocates device memory or
 * synchronizes a device. */
#ifndef KDA_KDA_H_
#define KDA_KDA_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KDA_API __declspec(dllexport)
#else
#define KDA_API __attribute__((visibility("default")))
#endif

/* Bumped when a struct below changes layout; kda_problem.abi_version must equal it. */
#define KDA_ABI_VERSION 1
#define KDA_MAX_RANK 6

typedef int32_t kda_status;
#define KDA_STATUS_OK 0
#define KDA_STATUS_INVALID_ARGUMENT 1
#define KDA_STATUS_UNSUPPORTED 2
#define KDA_STATUS_BACKEND_UNAVAILABLE 3
#define KDA_STATUS_CUDA_ERROR 4
#define KDA_STATUS_INTERNAL 5

#define KDA_DTYPE_F16 0
#define KDA_DTYPE_BF16 1
#define KDA_DTYPE_F32 2
#define KDA_DTYPE_I32 3
#define KDA_DTYPE_I64 4
#define KDA_DTYPE_F64 5

#define KDA_DEVICE_CPU 0
#define KDA_DEVICE_CUDA 1

#define KDA_BACKEND_CPU_REF 0
#define KDA_BACKEND_CPU 1
#define KDA_BACKEND_CUDA 2

/* A strided view; data == NULL and rank == 0 mean "argument omitted". Strides in elements. */
typedef struct kda_tensor {
  void* data;
  int32_t dtype;
  int32_t rank;
  int32_t device_type;
  int32_t device_index;
  int64_t shape[KDA_MAX_RANK];
  int64_t strides[KDA_MAX_RANK];
} kda_tensor;

typedef struct kda_problem {
  int32_t abi_version; /* = KDA_ABI_VERSION */
  int32_t state_v_first;
  int64_t chunk_size;
  int32_t has_scale; /* 0: scale = K ** -0.5 */
  int32_t reserved0;
  double scale;
  /* inputs */
  kda_tensor q, k, v, v_new, g, beta, A, h, do_, dh, dv;
  kda_tensor cu_seqlens, chunk_indices; /* optional */
  /* outputs */
  kda_tensor dq, dk, dv_out, db, dg, dA;
} kda_problem;

/* "0.1.0" */
KDA_API const char* kda_version(void);
/* major * 10000 + minor * 100 + patch */
KDA_API int32_t kda_version_number(void);
KDA_API int32_t kda_abi_version(void);
/* The message of the last failed call on this thread ("" if none). */
KDA_API const char* kda_last_error(void);
KDA_API const char* kda_status_name(kda_status status);
/* 1 when the backend is compiled in and usable on this machine (cuda: a visible device of
 * compute capability 9.0, which the sm_90a kernels need). */
KDA_API int32_t kda_backend_available(int32_t backend);
/* Checks `problem` against the SPEC contract without running anything. */
KDA_API kda_status kda_validate(const kda_problem* problem);
/* Validates and runs on `backend`; `stream` is a cudaStream_t for KDA_BACKEND_CUDA (NULL: default
 * stream) and ignored otherwise. */
KDA_API kda_status kda_run(const kda_problem* problem, int32_t backend, void* stream);
/* Number of chunks for cu_seqlens (int64, n_entries = N+1) at chunk_size. */
KDA_API kda_status kda_count_chunks(const int64_t* cu_seqlens, int64_t n_entries,
                                    int64_t chunk_size, int64_t* num_chunks);
/* Fills out[2 * num_chunks] (int64 pairs: sequence id, chunk id) from cu_seqlens. */
KDA_API kda_status kda_chunk_indices(const int64_t* cu_seqlens, int64_t n_entries,
                                     int64_t chunk_size, int64_t* out, int64_t num_chunks);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KDA_KDA_H_ */
