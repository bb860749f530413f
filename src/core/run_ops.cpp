// kda::run for every operator of kda/ops.h: validation once, the backend checks, then the
// operator's backend (core/op_backends.hpp, core/run_checks.hpp).

#include "core/op_backends.hpp"
#include "core/run_checks.hpp"

namespace kda {

namespace {

#if KDA_WITH_CUDA
#define KDA_CUDA_BACKEND(op) detail::run_##op##_cuda
#else
#define KDA_CUDA_BACKEND(op) nullptr
#endif

template <typename P>
struct BackendsOf;
#define KDA_BACKENDS_OF(UP, op, Cxx, fla, spec)                                    \
  template <>                                                                      \
  struct BackendsOf<Cxx##Problem> {                                                \
    static constexpr detail::OpBackends<Cxx##Problem, Cxx##Dims> value = {         \
        detail::run_##op##_cpu_ref, detail::run_##op##_cpu, KDA_CUDA_BACKEND(op)}; \
  };
KDA_OPS(KDA_BACKENDS_OF)
#undef KDA_BACKENDS_OF
#undef KDA_CUDA_BACKEND

}  // namespace

template <typename P>
Status run(const P& problem, Backend backend, void* stream, Kernel kernel) {
  return detail::run_validated(problem, backend, stream, kernel, BackendsOf<P>::value);
}

#define KDA_INSTANTIATE_RUN(UP, op, Cxx, fla, spec) \
  template Status run<Cxx##Problem>(const Cxx##Problem&, Backend, void*, Kernel);
KDA_OPS(KDA_INSTANTIATE_RUN)
#undef KDA_INSTANTIATE_RUN

}  // namespace kda
