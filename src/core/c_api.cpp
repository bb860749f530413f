// The C ABI's shared part: versions, errors, backends, kernels, the operators' argument tables
// and the chunk helpers. Each operator's entries are made from its table in c_api_ops.cpp.

#include <string>

#include "core/c_api_support.hpp"
#include "core/index_tensor.hpp"
#include "kda/kda.h"
#include "kda/kda.hpp"

namespace kda::c_api {

namespace {

thread_local std::string g_last_error;

}  // namespace

kda_status finish(const Status& status) {
  g_last_error = status.ok() ? std::string() : status.message;
  return static_cast<kda_status>(status.code);
}

Status to_view(const char* name, const kda_tensor& in, TensorView* out) {
  if (in.dtype < KDA_DTYPE_F16 || in.dtype > KDA_DTYPE_F64) {
    return invalid_argument(std::string("argument '") + name + "': unknown dtype code " +
                            std::to_string(in.dtype));
  }
  if (in.device_type != KDA_DEVICE_CPU && in.device_type != KDA_DEVICE_CUDA) {
    return invalid_argument(std::string("argument '") + name + "': unknown device type " +
                            std::to_string(in.device_type));
  }
  if (in.rank < 0 || in.rank > KDA_MAX_RANK) {
    return invalid_argument(std::string("argument '") + name + "': rank " +
                            std::to_string(in.rank) + " is outside 0.." +
                            std::to_string(KDA_MAX_RANK));
  }
  out->data = in.data;
  out->dtype = static_cast<DType>(in.dtype);
  out->rank = in.rank;
  out->device = {static_cast<DeviceType>(in.device_type), in.device_index};
  for (int d = 0; d < KDA_MAX_RANK; ++d) {
    out->shape[d] = d < in.rank ? in.shape[d] : 0;
    out->strides[d] = d < in.rank ? in.strides[d] : 0;
  }
  return Status::Ok();
}

Status check_abi_version(const char* what, const void* problem, int32_t abi_version) {
  if (problem == nullptr)
    return invalid_argument(std::string("argument '") + what + "': null pointer");
  if (abi_version != KDA_ABI_VERSION) {
    return invalid_argument(std::string("argument '") + what + "': abi_version " +
                            std::to_string(abi_version) + " does not match this libkda (" +
                            std::to_string(KDA_ABI_VERSION) + ")");
  }
  return Status::Ok();
}

Status to_backend(int32_t backend, Backend* out) {
  if (backend < KDA_BACKEND_CPU_REF || backend > KDA_BACKEND_CUDA) {
    return invalid_argument("argument 'backend': expected 0 (cpu-ref), 1 (cpu) or 2 (cuda), got " +
                            std::to_string(backend));
  }
  *out = static_cast<Backend>(backend);
  return Status::Ok();
}

Status to_kernel(int32_t kernel, Kernel* out) {
  if (kernel < KDA_KERNEL_AUTO || kernel > KDA_KERNEL_SM80_MMA) {
    return invalid_argument("argument 'kernel': expected 0 (auto), 1 (simt) or 2 (sm80_mma), got " +
                            std::to_string(kernel));
  }
  *out = static_cast<Kernel>(kernel);
  return Status::Ok();
}

}  // namespace kda::c_api

using kda::c_api::guarded;

extern "C" {

const char* kda_version(void) {
  return kda::kVersionString;
}

int32_t kda_version_number(void) {
  return kda::kVersionMajor * 10000 + kda::kVersionMinor * 100 + kda::kVersionPatch;
}

int32_t kda_abi_version(void) {
  return KDA_ABI_VERSION;
}

const char* kda_last_error(void) {
  return kda::c_api::g_last_error.c_str();
}

const char* kda_status_name(kda_status status) {
  if (status < KDA_STATUS_OK || status > KDA_STATUS_INTERNAL) return "unknown_status";
  return kda::status_code_name(static_cast<kda::StatusCode>(status));
}

int32_t kda_backend_available(int32_t backend) {
  if (backend < KDA_BACKEND_CPU_REF || backend > KDA_BACKEND_CUDA) return 0;
  return kda::backend_available(static_cast<kda::Backend>(backend)) ? 1 : 0;
}

const char* kda_kernel_name(int32_t kernel) {
  if (kernel < KDA_KERNEL_AUTO || kernel > KDA_KERNEL_SM80_MMA) return nullptr;
  return kda::kernel_name(static_cast<kda::Kernel>(kernel)).data();
}

const char* kda_op_name(int32_t op) {
  const kda::c_api::COpInfo* info = kda::c_api::op_info(op);
  return info ? info->name : nullptr;
}

const char* kda_op_fla_name(int32_t op) {
  const kda::c_api::COpInfo* info = kda::c_api::op_info(op);
  return info ? info->fla_name : nullptr;
}

int32_t kda_op_num_args(int32_t op) {
  const kda::c_api::COpInfo* info = kda::c_api::op_info(op);
  return info ? static_cast<int32_t>(info->rows.size()) : -1;
}

int64_t kda_op_problem_size(int32_t op) {
  const kda::c_api::COpInfo* info = kda::c_api::op_info(op);
  return info ? static_cast<int64_t>(info->problem_size) : -1;
}

kda_status kda_op_arg(int32_t op, int32_t index, kda_arg_info* out) {
  return guarded([&] {
    const kda::c_api::COpInfo* info = kda::c_api::op_info(op);
    if (info == nullptr) {
      return kda::invalid_argument("argument 'op': unknown operator " + std::to_string(op));
    }
    if (index < 0 || index >= static_cast<int32_t>(info->rows.size())) {
      return kda::invalid_argument("argument 'index': expected 0.." +
                                   std::to_string(info->rows.size() - 1) + ", got " +
                                   std::to_string(index));
    }
    if (out == nullptr) return kda::invalid_argument("argument 'out': null pointer");
    const kda::c_api::CArg& a = info->rows[static_cast<size_t>(index)];
    *out = {a.name, a.doc, a.role, a.rank, static_cast<int64_t>(a.offset), a.type, 0, a.rule};
    return kda::Status::Ok();
  });
}

// Checks the caller's cu_seqlens pointer and entry count; the entries themselves are read where
// they are walked (walk_cu_seqlens), so nothing is copied or allocated for them.
static kda::Status check_cu(const int64_t* cu_seqlens, int64_t n_entries) {
  if (cu_seqlens == nullptr) return kda::invalid_argument("argument 'cu_seqlens': null pointer");
  if (n_entries < 1) {
    return kda::invalid_argument("argument 'cu_seqlens': expected at least one entry, got " +
                                 std::to_string(n_entries));
  }
  return kda::Status::Ok();
}

kda_status kda_count_chunks(const int64_t* cu_seqlens, int64_t n_entries, int64_t chunk_size,
                            int64_t* num_chunks) {
  return guarded([&] {
    if (kda::Status s = check_cu(cu_seqlens, n_entries); !s.ok()) return s;
    if (num_chunks == nullptr) return kda::invalid_argument("argument 'num_chunks': null pointer");
    int64_t total = 0;
    const auto entry_at = [&](int64_t i) { return cu_seqlens[i]; };
    if (kda::Status s = kda::count_cu_seqlens_chunks(n_entries, entry_at, chunk_size, &total);
        !s.ok()) {
      return s;
    }
    *num_chunks = total;
    return kda::Status::Ok();
  });
}

kda_status kda_chunk_indices(const int64_t* cu_seqlens, int64_t n_entries, int64_t chunk_size,
                             int64_t* out, int64_t num_chunks) {
  return guarded([&] {
    if (kda::Status s = check_cu(cu_seqlens, n_entries); !s.ok()) return s;
    // The count is checked against the caller's room before anything is written.
    const auto entry_at = [&](int64_t i) { return cu_seqlens[i]; };
    int64_t total = 0;
    if (kda::Status s = kda::count_cu_seqlens_chunks(n_entries, entry_at, chunk_size, &total);
        !s.ok()) {
      return s;
    }
    if (total != num_chunks) {
      return kda::invalid_argument("argument 'num_chunks': cu_seqlens has " +
                                   std::to_string(total) + " chunks, got room for " +
                                   std::to_string(num_chunks));
    }
    if (num_chunks > 0 && out == nullptr)
      return kda::invalid_argument("argument 'out': null pointer");
    int64_t row = 0;
    return kda::walk_cu_seqlens(n_entries, entry_at, chunk_size, [&](int64_t seq, int64_t chunks) {
      for (int64_t c = 0; c < chunks; ++c, ++row) {
        out[2 * row] = seq;
        out[2 * row + 1] = c;
      }
      return kda::Status::Ok();
    });
  });
}

}  // extern "C"
