#pragma once
// Device copies of a HostIntra for the GPU tests and the benchmark: inputs uploaded in their
// layouts (StridedInputs' storage, gaps included), outputs allocated contiguous; poison, run,
// download, and a check that no input byte changed. Plain C++ over the CUDA runtime API.

#include <cuda_runtime.h>

#include <map>
#include <string>

#include "intra_problem.hpp"
#include "kda/status.hpp"

namespace kda::testing::intra {

// Number of visible CUDA devices (0 when there is no GPU or no driver).
int cuda_device_count();
// Throws std::runtime_error naming `what` when `status` is not cudaSuccess.
void check_cuda(cudaError_t status, const char* what);

class DeviceIntra {
 public:
  explicit DeviceIntra(const HostIntra& host, int device = 0);
  DeviceIntra(HostIntra&& host, int device = 0) = delete;  // kept by reference
  ~DeviceIntra();
  DeviceIntra(const DeviceIntra&) = delete;
  DeviceIntra& operator=(const DeviceIntra&) = delete;

  const ChunkBwdIntraProblem& problem() const { return problem_; }
  // fla's algorithm switch (no effect on the math; the benchmark times both values).
  void set_safe_gate(bool safe_gate) { problem_.safe_gate = safe_gate; }
  // Raw device pointer of a tensor (input or output name), for tests that edit device memory.
  void* data(const std::string& name) const { return buffers_.at(name).ptr; }
  size_t bytes(const std::string& name) const { return buffers_.at(name).bytes; }
  // Fills every output with all-ones bytes (NaN in float32) and waits.
  void poison_outputs();
  // The four outputs, keyed by output name (dq_out, ...), after the device's queued work.
  std::map<std::string, io::HostTensor> download_outputs() const;
  // True when every input's device bytes still equal the bytes uploaded.
  bool inputs_unchanged(std::string* which) const;

 private:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  const HostIntra& host_;
  StridedInputs strided_;
  std::map<std::string, Buffer> buffers_;
  ChunkBwdIntraProblem problem_;
};

// Runs the CUDA backend on `dev` with `dims` (host.dims(), or host.dims(true) for the upper bound
// on NT that device-resident cu_seqlens without chunk_indices get) on `stream`.
Status run_cuda(const DeviceIntra& dev, const ChunkBwdIntraDims& dims,
                cudaStream_t stream = nullptr);

}  // namespace kda::testing::intra
