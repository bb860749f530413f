#pragma once
// Small helpers shared by the test files: fresh seeds, index dtype conversion, the float64
// reference of a problem, output inspection, chunk geometry (C ABI structs: c_abi_view.hpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "c_abi_view.hpp"
#include "io/host_problem.hpp"
#include "kda/kda.h"
#include "kda/kda.hpp"

namespace kda::testing {

// chunk_bwd_wy_dqkg's file and tooling registration (io/host_problem.hpp).
inline const io::OpIo& wy_io() {
  return *io::find_op(ChunkBwdWyDqkgProblem::kName);
}

// chunk_bwd_wy_dqkg's output names ("out.dq", ..., "out.dA"), from its argument table.
inline const std::vector<std::string>& wy_outputs() {
  static const std::vector<std::string> names =
      io::arg_names<ChunkBwdWyDqkgProblem>(ArgRole::output);
  return names;
}

// A new seed every call, so every run draws fresh inputs (print it on failure to replay);
// KDA_TEST_SEED=<seed> replays a printed one (every call then returns it: filter to the case).
inline uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("KDA_TEST_SEED"); fixed != nullptr && *fixed != '\0')
    return std::strtoull(fixed, nullptr, 10);
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// Converts the index tensors of `hp` (cu_seqlens, chunk_indices) to int32.
inline void use_int32_indices(io::HostProblem& hp) {
  for (const char* name : {"cu_seqlens", "chunk_indices"}) {
    if (!hp.has(name)) continue;
    const io::HostTensor& wide = hp.get(name);
    io::HostTensor narrow(DType::i32, wide.shape);
    for (int64_t i = 0; i < wide.numel(); ++i) narrow.set(i, wide.at(i));
    hp.tensors[name] = narrow;
  }
}

// A copy of `hp` with its outputs computed by the float64 cpu-ref backend.
inline io::HostProblem reference_of(const io::HostProblem& hp) {
  io::HostProblem ref = hp;
  const Status s = io::op_of(ref).run(ref.views(), ref, Backend::cpu_ref, nullptr, Kernel::auto_);
  if (!s.ok()) throw std::runtime_error("cpu-ref failed: " + s.message);
  return ref;
}

// True when every output of `hp` still holds the NaN it was allocated with (nothing written).
inline bool all_outputs_poisoned(const io::HostProblem& hp) {
  for (const std::string& name : hp.output_names()) {
    const io::HostTensor& t = hp.get(name);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (!std::isnan(t.at(i))) return false;
    }
  }
  return true;
}

// Element i of a and b (same dtype and shape) has the same bits.
inline bool bitwise_equal(const io::HostTensor& a, const io::HostTensor& b, int64_t i) {
  const size_t n = dtype_size(a.dtype);
  return std::memcmp(a.bytes.data() + i * n, b.bytes.data() + i * n, n) == 0;
}

// An output element's (batch row, token, value head, innermost index); every output is
// [B, T, HV, ...] (db has no innermost extent: col 0).
struct Coords {
  int64_t b, t, hv, col;
};
inline Coords coords_of(const io::HostTensor& t, int64_t i) {
  const int64_t inner = t.shape.size() == 4 ? t.shape[3] : 1;
  const int64_t HV = t.shape[2], T = t.shape[1];
  const int64_t row = i / inner;
  return {row / (HV * T), (row / HV) % T, row % HV, i % inner};
}

// The chunk [t0, t1) holding token t of a problem built from `c` (fixed length or cu_seqlens).
inline std::pair<int64_t, int64_t> chunk_of(const io::WyDqkgConfig& c, int64_t t) {
  if (c.seqlens.empty()) {
    const int64_t t0 = t / c.BT * c.BT;
    return {t0, std::min(t0 + c.BT, c.T)};
  }
  int64_t bos = 0;
  for (int64_t len : c.seqlens) {
    if (t < bos + len) {
      const int64_t t0 = bos + (t - bos) / c.BT * c.BT;
      return {t0, std::min(t0 + c.BT, bos + len)};
    }
    bos += len;
  }
  return {0, 0};
}

}  // namespace kda::testing
