#pragma once
// Host-side chunk_bwd_intra problems for the tests and the benchmark: owning buffers
// (io::HostTensor, contiguous, holding each tensor's logical contents), random inputs drawn as the
// SPEC's accuracy section says, the golden files, optional non-contiguous layouts of the inputs,
// the dims a valid problem has (validate() does not exist yet), and the comparisons every test
// makes. (To be folded into the generic per-operator test machinery.)

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/ops/chunk_bwd_intra.hpp"
#include "kda/status.hpp"

namespace kda::testing::intra {

// Input names (SPEC argument names), then the outputs as the problem's fields name them.
inline const char* const kInputNames[] = {"q",    "k",  "g",  "beta", "dAqk",
                                          "dAkk", "dq", "dk", "db",   "dg"};
inline const char* const kOutputNames[] = {"dq_out", "dk_out", "db_out", "dg_out"};
// The SPEC's name of an output ("dq_out" -> "dq").
std::string spec_name(const std::string& output);

// How an input is stored (its logical contents stay the same):
enum class Layout {
  contiguous,       // row-major
  padded,           // row-major with 3 spare elements after every innermost row
  channel_strided,  // the last two dimensions swapped in memory: innermost stride != 1
  time_major,       // [T, B, ...] in memory: batch stride < token stride
};
const char* layout_name(Layout layout);

struct Config {
  int64_t B = 1, T = 150, H = 2, HV = 0 /* 0: = H */, K = 64, BT = 64;
  DType x_dtype = DType::bf16;
  DType beta_dtype = DType::f32;  // float32, or x_dtype for "beta in X"
  std::vector<int64_t> seqlens;   // non-empty: varlen (B must be 1, T = the sum)
  bool pass_chunk_indices = false;
  DType index_dtype = DType::i64;  // of cu_seqlens and chunk_indices
  bool safe_gate = false;
  // Per-token natural-log decays: "strong" channels (every fourth, by (hv + c) % 4 == 1) draw from
  // [-5, -4.6] (within-chunk log2 cumsums down to about -460 at BT = 64), the rest log-uniformly
  // from [-1, -0.001]. all_strong: every channel strong.
  bool all_strong = false;
  uint64_t seed = 0;
};

struct HostIntra {
  std::map<std::string, io::HostTensor> tensors;  // inputs by name, outputs by output name
  std::map<std::string, Layout> layouts;          // inputs not stored contiguously
  int64_t chunk_size = 64;
  bool safe_gate = false;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  const io::HostTensor& get(const std::string& name) const;
  io::HostTensor& get(const std::string& name);
  DType x_dtype() const { return get("q").dtype; }
  // Allocates the four outputs and fills them with NaN (poison: every element must be written).
  void allocate_outputs();
  // The dims a valid problem has. NT: the true chunk count, or with nt_upper_bound (varlen
  // without chunk_indices) min(T, T / BT + N), the bound the CUDA backend gets for device-resident
  // cu_seqlens.
  ChunkBwdIntraDims dims(bool nt_upper_bound = false) const;
  // One line for failure messages: shapes, dtypes, options, layouts.
  std::string describe() const;
};

// Inputs drawn as SPEC-chunk-bwd-intra.md's accuracy section says: q, k with unit-norm rows; g the
// chunk-local cumsum (restarting at every chunk, varlen-aware) of per-token log2 decays <= 0; beta
// ~ U(0.05, 0.95); dAqk, dAkk ~ N(0, 1) where j <= i inside the chunk (the dAkk diagonal
// included) and garbage (NaN, ±Inf, 100.0) in every entry the operator must not read; incoming
// dq, dk, db ~ N(0, 0.1), dg ~ N(0, 0.02). Outputs allocated and poisoned.
HostIntra make_random(const Config& config);

// A golden file of ../shared/golden-intra: inputs by name, expected outputs into *expected keyed
// by SPEC name (dq, dk, db, dg), chunk_size and safe_gate from the metadata. Outputs allocated and
// poisoned.
Status load_golden(const std::string& path, HostIntra* out,
                   std::map<std::string, io::HostTensor>* expected);

// Element strides of a tensor of `shape` stored in `layout`, and the number of elements its
// storage spans.
std::array<int64_t, kMaxRank> layout_strides(const std::vector<int64_t>& shape, Layout layout);
int64_t layout_span(const std::vector<int64_t>& shape,
                    const std::array<int64_t, kMaxRank>& strides);

// The storage of every input in its layout (gaps filled with a recognisable byte pattern) and a
// problem whose input views point into it, on `device` (the data pointers are host pointers:
// DeviceIntra in intra_device.hpp replaces them). Outputs view the host's output tensors.
class StridedInputs {
 public:
  explicit StridedInputs(const HostIntra& host);
  const std::map<std::string, std::vector<uint8_t>>& storage() const { return storage_; }
  // Views of the inputs over storage() (host) and of host's outputs.
  ChunkBwdIntraProblem problem(HostIntra& host) const;
  // The view of input `name` with data == nullptr (strides and shape only).
  const TensorView& view(const std::string& name) const { return views_.at(name); }

 private:
  std::map<std::string, std::vector<uint8_t>> storage_;
  std::map<std::string, TensorView> views_;
  bool safe_gate_ = false;
  int64_t chunk_size_ = 64;
};

enum class CpuBackend { cpu_ref, cpu };
// Runs a CPU backend on `host` (inputs in their layouts), writing host's outputs.
Status run_cpu_backend(CpuBackend backend, HostIntra& host);

// Pass bars (SPEC-chunk-bwd-intra.md): against the float64 reference, and against the golden
// files' outputs.
double pass_bar(DType x_dtype);
double golden_bar(DType x_dtype);

// Number of non-finite elements of a tensor.
int64_t count_non_finite(const io::HostTensor& t);
// True when a and b hold the same bytes.
bool bitwise_equal(const io::HostTensor& a, const io::HostTensor& b);

// Token ranges [t0, t1) (rows of batch row b) of every chunk of `host`, in unit order.
struct ChunkRange {
  int64_t b, t0, t1;
};
std::vector<ChunkRange> chunk_ranges(const HostIntra& host);

}  // namespace kda::testing::intra
