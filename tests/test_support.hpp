#pragma once
// Small helpers shared by the test files: fresh seeds, index dtype conversion, the float64
// reference of a problem.

#include <cstdint>
#include <random>
#include <stdexcept>

#include "io/host_problem.hpp"
#include "kda/kda.hpp"

namespace kda::testing {

// A new seed every call, so every run draws fresh inputs (print it on failure to replay).
inline uint64_t fresh_seed() {
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
  const Status s = run(ref.problem(), Backend::cpu_ref);
  if (!s.ok()) throw std::runtime_error("cpu-ref failed: " + s.message);
  return ref;
}

}  // namespace kda::testing
