#pragma once
// The pieces every operator's C ABI entries share: the thread-local last error, exception
// guards, kda_tensor -> TensorView, a problem struct's tensors converted through the operator's
// argument table, and each operator's table for kda_op_arg (core/c_api_ops.cpp).

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

// One row of an operator's C table: what kda_op_arg reports.
struct CArg {
  const char* name;
  const char* doc;
  int32_t role;
  int32_t rank;
  std::size_t offset;  // of its kda_tensor, or its option field, in the C problem struct
  int32_t type;
  const char* rule;
};

// What each operator has for the C ABI's introspection (core/c_api_ops.cpp builds them).
struct COpInfo {
  const char* name;
  const char* fla_name;
  std::span<const CArg> rows;  // every row, tensors and options, in table order
  std::size_t problem_size;
};

// The operator of code `op` (KDA_OP_*), or nullptr (core/c_api_ops.cpp).
const COpInfo* op_info(int32_t op);

// The tensors of C problem `in` into C++ problem `out`, by the operator's table (`rows`; its
// tensor rows are P::args(), in the same order).
template <typename P>
Status to_tensors(const void* in, std::span<const CArg> rows, P* out) {
  const auto* base = static_cast<const unsigned char*>(in);
  std::span<const Arg<P>> args = P::args();
  std::size_t i = 0;
  for (const CArg& row : rows) {
    if (row.role == KDA_ARG_OPTION) continue;
    if (i == args.size()) return {StatusCode::internal, "C and C++ tables differ"};
    const auto* tensor = reinterpret_cast<const kda_tensor*>(base + row.offset);
    if (Status s = to_view(args[i].info.name, *tensor, &args[i].of(*out)); !s.ok()) return s;
    ++i;
  }
  return Status::Ok();
}

}  // namespace kda::c_api
