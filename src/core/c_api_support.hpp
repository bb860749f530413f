#pragma once
// The pieces every operator's C ABI entries share: the thread-local last error, exception
// guards, kda_tensor -> TensorView, a problem struct's tensors converted through the operator's
// argument table, and the table each operator registers for kda_op_arg (core/c_api.cpp).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>

#include "kda/args.hpp"
#include "kda/backend.hpp"
#include "kda/kda.h"
#include "kda/status.hpp"

namespace kda::c_api {

// Records `status` as this thread's last error (cleared on success) and returns its code.
kda_status finish(const Status& status);

// Runs fn() -> Status; an escaping exception becomes an internal error.
template <typename Fn>
kda_status guarded(Fn&& fn) {
  try {
    return finish(fn());
  } catch (const std::exception& e) {
    return finish({StatusCode::internal, std::string("internal error: ") + e.what()});
  } catch (...) {
    return finish({StatusCode::internal, "internal error: unknown exception"});
  }
}

Status to_view(const char* name, const kda_tensor& in, TensorView* out);
Status check_abi_version(const char* what, const void* problem, int32_t abi_version);
Status to_backend(int32_t backend, Backend* out);
Status to_kernel(int32_t kernel, Kernel* out);

// One row of an operator's C argument table: what kda_op_arg reports.
struct CArg {
  const char* name;
  const char* doc;
  int32_t role;
  int32_t rank;
  std::size_t offset;  // of its kda_tensor in the operator's C problem struct
};

// What an operator registers for the C ABI's introspection (core/c_api.cpp lists them).
struct COpInfo {
  const char* name;
  std::span<const CArg> args;
  std::size_t problem_size;
};

// The tensors of C problem `in` into C++ problem `out`, by the operator's tables (same order).
template <typename P>
Status to_tensors(const void* in, std::span<const CArg> c_args, std::span<const Arg<P>> args,
                  P* out) {
  if (c_args.size() != args.size()) {
    return {StatusCode::internal, "C and C++ argument tables differ in length"};
  }
  const auto* base = static_cast<const unsigned char*>(in);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto* tensor = reinterpret_cast<const kda_tensor*>(base + c_args[i].offset);
    if (Status s = to_view(args[i].info.name, *tensor, &args[i].of(*out)); !s.ok()) return s;
  }
  return Status::Ok();
}

// The bodies of an operator's kda_<op>_validate and kda_<op>_run: C problem -> C++ problem
// through the operator's `to_problem`, then validate() or kda::run(), every failure recorded as the
// thread's last error.
template <typename P, typename CP>
kda_status validate_entry(const CP* in, Status (*to_problem)(const CP*, P*)) {
  return guarded([&] {
    P p;
    if (Status s = to_problem(in, &p); !s.ok()) return s;
    return p.validate();
  });
}

template <typename P, typename CP>
kda_status run_entry(const CP* in, int32_t backend, int32_t kernel, void* stream,
                     Status (*to_problem)(const CP*, P*)) {
  return guarded([&] {
    Backend b{};
    Kernel k{};
    if (Status s = to_backend(backend, &b); !s.ok()) return s;
    if (Status s = to_kernel(kernel, &k); !s.ok()) return s;
    P p;
    if (Status s = to_problem(in, &p); !s.ok()) return s;
    return run(p, b, stream, k);
  });
}

}  // namespace kda::c_api

// One CArg per argument-table row, for a table built where `CP` names the C problem struct.
#define KDA_MAKE_C_ARG(member, name, role, rank, doc) \
  ::kda::c_api::CArg{name, doc, role, rank, offsetof(CP, member)},
