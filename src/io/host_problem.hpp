#pragma once
// Host-owned tensors for a whole problem: built from a safetensors file or generated at random
// like SPEC.md's examples. Used by the `kda` tool and the tests; not part of libkda's API.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kda/problem.hpp"

namespace kda::io {

struct HostTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // row-major

  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape);  // zero-filled
  int64_t numel() const;
  TensorView view(Device device = {}) const;  // contiguous view of bytes (data is non-const)
  double at(int64_t i) const;                 // element i (row-major) as double
  void set(int64_t i, double value);          // rounds to dtype
};

// Names follow SPEC.md: q k v v_new g beta A h do dh dv [cu_seqlens chunk_indices] and outputs
// dq dk dv_out db dg dA.
struct HostProblem {
  std::map<std::string, HostTensor> tensors;
  std::optional<double> scale;
  int64_t chunk_size = 64;
  bool state_v_first = false;

  // Allocates the six outputs (shapes and dtypes per SPEC) and fills them with NaN (poison).
  void allocate_outputs();
  // Views over every tensor present (outputs must be allocated).
  Problem problem() const;
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  const HostTensor& get(const std::string& name) const;
  HostTensor& get(const std::string& name);
};

inline const char* const kOutputNames[] = {"dq", "dk", "dv_out", "db", "dg", "dA"};

struct ProblemConfig {
  int64_t B = 1, T = 2048, H = 32, HV = 0 /* 0: = H */, K = 128, V = 128, BT = 64;
  DType x_dtype = DType::bf16;
  DType h_dtype = DType::f32;
  DType beta_dtype = DType::f32;  // set equal to x_dtype for "beta in X"
  std::vector<int64_t> seqlens;   // non-empty: varlen, B must be 1 and T = sum
  bool pass_chunk_indices = false;
  bool state_v_first = false;
  std::optional<double> scale;
  uint64_t seed = 0;
};

// Inputs drawn like the golden files: q k v v_new do dv h dh ~ N(0, 1); A ~ N(0, 0.1) (full, as
// stored); g ~ -U(0.05, 2.5) (log2 space); beta ~ U(0.05, 0.95). Outputs allocated and poisoned.
HostProblem make_random_problem(const ProblemConfig& config);
// The same, with a check of the allocated problem (inputs still zero) before the values are
// drawn: a problem the library will refuse is refused in a moment, not after filling gigabytes.
Status make_random_problem(const ProblemConfig& config,
                           const std::function<Status(const Problem&)>& check_before_filling,
                           HostProblem* out);

// rms(x - ref) / rms(ref) over the elements where ref is finite. Where ref is NaN or Inf, x must
// hold the same (both NaN, or the same infinity): those elements are left out. NaN when x and ref
// disagree on an element's finiteness (or in element count), so that no bar passes.
double err_ratio(const HostTensor& x, const HostTensor& ref);

// SPEC pass bar against the float64 reference for X and h dtypes, and the golden-file bar.
double pass_bar(DType x_dtype);
double golden_bar(DType x_dtype);

}  // namespace kda::io
