// The C ABI: converts kda_* structs to the C++ types, runs, and keeps the last error per thread.

#include <exception>
#include <string>

#include "kda/kda.h"
#include "kda/kda.hpp"

#include "core/index_tensor.hpp"

namespace {

thread_local std::string g_last_error;

kda_status finish(const kda::Status& status) {
  g_last_error = status.ok() ? std::string() : status.message;
  return static_cast<kda_status>(status.code);
}

kda::Status to_view(const char* name, const kda_tensor& in, kda::TensorView* out) {
  if (in.dtype < KDA_DTYPE_F16 || in.dtype > KDA_DTYPE_F64) {
    return kda::invalid_argument(std::string("argument '") + name + "': unknown dtype code " +
                                 std::to_string(in.dtype));
  }
  if (in.device_type != KDA_DEVICE_CPU && in.device_type != KDA_DEVICE_CUDA) {
    return kda::invalid_argument(std::string("argument '") + name + "': unknown device type " +
                                 std::to_string(in.device_type));
  }
  if (in.rank < 0 || in.rank > KDA_MAX_RANK) {
    return kda::invalid_argument(std::string("argument '") + name + "': rank " +
                                 std::to_string(in.rank) + " is outside 0.." +
                                 std::to_string(KDA_MAX_RANK));
  }
  out->data = in.data;
  out->dtype = static_cast<kda::DType>(in.dtype);
  out->rank = in.rank;
  out->device = {static_cast<kda::DeviceType>(in.device_type), in.device_index};
  for (int d = 0; d < KDA_MAX_RANK; ++d) {
    out->shape[d] = d < in.rank ? in.shape[d] : 0;
    out->strides[d] = d < in.rank ? in.strides[d] : 0;
  }
  return kda::Status::Ok();
}

kda::Status to_problem(const kda_problem* in, kda::Problem* p) {
  if (in == nullptr) return kda::invalid_argument("argument 'problem': null pointer");
  if (in->abi_version != KDA_ABI_VERSION) {
    return kda::invalid_argument("argument 'problem': abi_version " +
                                 std::to_string(in->abi_version) + " does not match this libkda (" +
                                 std::to_string(KDA_ABI_VERSION) + ")");
  }
  struct Field {
    const char* name;
    const kda_tensor* from;
    kda::TensorView* to;
  };
  const Field fields[] = {
      {"q", &in->q, &p->q},
      {"k", &in->k, &p->k},
      {"v", &in->v, &p->v},
      {"v_new", &in->v_new, &p->v_new},
      {"g", &in->g, &p->g},
      {"beta", &in->beta, &p->beta},
      {"A", &in->A, &p->A},
      {"h", &in->h, &p->h},
      {"do", &in->do_, &p->do_},
      {"dh", &in->dh, &p->dh},
      {"dv", &in->dv, &p->dv},
      {"cu_seqlens", &in->cu_seqlens, &p->cu_seqlens},
      {"chunk_indices", &in->chunk_indices, &p->chunk_indices},
      {"dq", &in->dq, &p->dq},
      {"dk", &in->dk, &p->dk},
      {"dv_out", &in->dv_out, &p->dv_out},
      {"db", &in->db, &p->db},
      {"dg", &in->dg, &p->dg},
      {"dA", &in->dA, &p->dA},
  };
  for (const Field& f : fields) {
    if (kda::Status s = to_view(f.name, *f.from, f.to); !s.ok()) return s;
  }
  if (in->has_scale) p->scale = in->scale;
  p->chunk_size = in->chunk_size;
  p->state_v_first = in->state_v_first != 0;
  return kda::Status::Ok();
}

template <typename Fn>
kda_status guarded(Fn&& fn) {
  try {
    return finish(fn());
  } catch (const std::exception& e) {
    return finish({kda::StatusCode::internal, std::string("internal error: ") + e.what()});
  } catch (...) {
    return finish({kda::StatusCode::internal, "internal error: unknown exception"});
  }
}

}  // namespace

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
  return g_last_error.c_str();
}

const char* kda_status_name(kda_status status) {
  if (status < KDA_STATUS_OK || status > KDA_STATUS_INTERNAL) return "unknown_status";
  return kda::status_code_name(static_cast<kda::StatusCode>(status));
}

int32_t kda_backend_available(int32_t backend) {
  if (backend < KDA_BACKEND_CPU_REF || backend > KDA_BACKEND_CUDA) return 0;
  return kda::backend_available(static_cast<kda::Backend>(backend)) ? 1 : 0;
}

kda_status kda_validate(const kda_problem* problem) {
  return guarded([&] {
    kda::Problem p;
    if (kda::Status s = to_problem(problem, &p); !s.ok()) return s;
    return p.validate();
  });
}

kda_status kda_run(const kda_problem* problem, int32_t backend, void* stream) {
  return guarded([&] {
    if (backend < KDA_BACKEND_CPU_REF || backend > KDA_BACKEND_CUDA) {
      return kda::invalid_argument(
          "argument 'backend': expected 0 (cpu-ref), 1 (cpu) or 2 (cuda), got " +
          std::to_string(backend));
    }
    kda::Problem p;
    if (kda::Status s = to_problem(problem, &p); !s.ok()) return s;
    return kda::run(p, static_cast<kda::Backend>(backend), stream);
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
