#pragma once
// Every operator's backend entry points behind kda::run (core/run_ops.cpp), declared once from
// the list of operators (kda/ops.h) and defined in the operator's folder:
//   detail::run_<op>_cpu_ref  float64, plain loops that read like the SPEC: the judge of the others
//   detail::run_<op>_cpu      float32, threaded over units of work
//   detail::run_<op>_cuda     its launches on `stream` (a cudaStream_t; one, or two for
//                             chunk_bwd_epilogue's reduction); no allocation, no
//                             synchronization; `kernel` is the caller's choice
// Each receives a problem that validate() accepted and the dims it derived: inputs are read
// through their strides, outputs are contiguous row-major and overlap nothing.

#include "kda/kda.hpp"

namespace kda::detail {

#if KDA_WITH_CUDA
#define KDA_DECLARE_CUDA_BACKEND(op, Cxx)                                                   \
  Status run_##op##_cuda(const Cxx##Problem& problem, const Cxx##Dims& dims, Kernel kernel, \
                         void* stream);
#else
#define KDA_DECLARE_CUDA_BACKEND(op, Cxx)
#endif

#define KDA_DECLARE_BACKENDS(UP, op, Cxx, fla, spec)                             \
  Status run_##op##_cpu_ref(const Cxx##Problem& problem, const Cxx##Dims& dims); \
  Status run_##op##_cpu(const Cxx##Problem& problem, const Cxx##Dims& dims);     \
  KDA_DECLARE_CUDA_BACKEND(op, Cxx)
KDA_OPS(KDA_DECLARE_BACKENDS)
#undef KDA_DECLARE_BACKENDS
#undef KDA_DECLARE_CUDA_BACKEND

}  // namespace kda::detail
