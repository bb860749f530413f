/* kda-kernels C ABI: a stable, C-callable face over the C++ core, for Python (ctypes) and other
 * languages. Every function returns a kda_status; on failure kda_last_error() holds a one-line
 * message (thread-local) naming the bad argument. Nothing here allocates device memory or
 * synchronizes a device.
 *
 * The shared pieces are here (tensors, status codes, backends, kernels, versions, chunk helpers,
 * the operators' argument tables); each operator has its own header under kda/ops/ with its
 * problem struct and its kda_<op>_validate / kda_<op>_run entries, all included below. */
#ifndef KDA_KDA_H_
#define KDA_KDA_H_

#include <stdint.h>

#include "kda/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KDA_API __declspec(dllexport)
#else
#define KDA_API __attribute__((visibility("default")))
#endif

/* Bumped when a struct below changes layout; every problem struct's abi_version must equal it.
 * 2: one problem struct and entry points per operator (was kda_problem / kda_run), kernel
 * choice, argument tables. 3: the problem structs are generated from the operators' tables
 * (options after abi_version, in table order), kda_arg_info has type and rule, options are rows
 * of the tables. */
#define KDA_ABI_VERSION 3
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

/* Which CUDA kernel runs (kda_kernel_name gives the names). AUTO: the fastest kernel that takes
 * the problem (the library reads no environment). A kernel the operator
 * does not have, or one that cannot take the problem, is refused (KDA_STATUS_UNSUPPORTED); CPU
 * backends take AUTO only. */
#define KDA_KERNEL_AUTO 0
#define KDA_KERNEL_SIMT 1     /* float32 FFMA on the SIMT cores: every option, every dtype */
#define KDA_KERNEL_SM80_MMA 2 /* mma.sync tensor-core kernels (built for sm_90a) */

/* The operators' codes, KDA_OP_<UP> in KDA_OPS order (kda/ops.h; kda_op_name gives their
 * names), and how many there are. */
#define KDA_OP_CODE(UP, op, Cxx, fla_name, spec) KDA_OP_##UP,
enum kda_op { KDA_OPS(KDA_OP_CODE) KDA_NUM_OPS };
#undef KDA_OP_CODE

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

/* One row of an operator's table (see kda/args.h). */
typedef struct kda_arg_info {
  const char* name; /* "q", ..., "scale", ..., "out.dq" */
  const char* doc;  /* shape and dtype, or what an option means */
  int32_t role;     /* KDA_ARG_INPUT, KDA_ARG_OPTIONAL, KDA_ARG_OPTION or KDA_ARG_OUTPUT */
  int32_t rank;     /* 0 for options */
  int64_t offset;   /* byte offset in the problem struct: of a tensor's kda_tensor, an option's
                       field (KDA_TYPE_FLOAT_OR_NONE: its has_ flag; the double follows at the
                       next multiple of 8) */
  int32_t type;     /* KDA_TYPE_* */
  int32_t reserved;
  const char* rule; /* an output's shape rule, an option's default, "" for inputs */
} kda_arg_info;

/* "0.2.0" */
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
/* "auto", "simt", "sm80_mma"; NULL for an unknown code. */
KDA_API const char* kda_kernel_name(int32_t kernel);

/* The operators and their tables: what a binding needs to lay out a problem struct.
 * kda_op_name: "chunk_bwd_wy_dqkg", "chunk_bwd_intra" (NULL for an unknown op).
 * kda_op_fla_name: "chunk_kda_bwd_wy_dqkg_fused", ... (NULL for an unknown op).
 * kda_op_num_args: rows in its table, tensors and options (-1 for an unknown op).
 * kda_op_problem_size: sizeof its problem struct (-1 for an unknown op). */
KDA_API const char* kda_op_name(int32_t op);
KDA_API const char* kda_op_fla_name(int32_t op);
KDA_API int32_t kda_op_num_args(int32_t op);
KDA_API int64_t kda_op_problem_size(int32_t op);
KDA_API kda_status kda_op_arg(int32_t op, int32_t index, kda_arg_info* out);

/* Number of chunks for cu_seqlens (int64, n_entries = N+1) at chunk_size. */
KDA_API kda_status kda_count_chunks(const int64_t* cu_seqlens, int64_t n_entries,
                                    int64_t chunk_size, int64_t* num_chunks);
/* Fills out[2 * num_chunks] (int64 pairs: sequence id, chunk id) from cu_seqlens. */
KDA_API kda_status kda_chunk_indices(const int64_t* cu_seqlens, int64_t n_entries,
                                     int64_t chunk_size, int64_t* out, int64_t num_chunks);

/* Each operator's problem struct kda_<op>_problem and its entries kda_<op>_validate and
 * kda_<op>_run (see KDA_DECLARE_C_OP in kda/args.h; the fields are its table's rows). */
KDA_OPS(KDA_DECLARE_C_OP)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KDA_KDA_H_ */
