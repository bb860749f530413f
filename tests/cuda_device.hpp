#pragma once
// Device copies of a HostProblem for the GPU tests: upload, poison, run, download, and check that
// inputs were left untouched.

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/kda.hpp"

// Skips the calling test, saying why, when no CUDA device is visible (CI has none).
#define SKIP_WITHOUT_GPU()                                                         \
  if (kda::testing::cuda_device_count() == 0) {                                    \
    GTEST_SKIP() << "no CUDA device visible: GPU test skipped (runs on the H200)"; \
  }

namespace kda::testing {

// Number of visible CUDA devices (0 when there is no GPU or no driver).
int cuda_device_count();

class DeviceProblem {
 public:
  // Copies every tensor of `host` to `device`. `padded` names inputs to store with a padded
  // head stride (last dim + 3 elements) to exercise non-contiguous inputs.
  DeviceProblem(const io::HostProblem& host, int device = 0,
                const std::vector<std::string>& padded = {});
  // `host` is kept by reference (downloads and checksums use it): a temporary would dangle.
  DeviceProblem(io::HostProblem&& host, int device = 0,
                const std::vector<std::string>& padded = {}) = delete;
  ~DeviceProblem();
  DeviceProblem(const DeviceProblem&) = delete;
  DeviceProblem& operator=(const DeviceProblem&) = delete;

  // The problem over the device copies, as operator P's (the host problem's operator).
  template <typename P>
  P as() const {
    return io::problem_from_views<P>(views_, host_);
  }
  // Runs the host problem's operator on the device copies.
  Status run(Backend backend, void* stream = nullptr, Kernel kernel = Kernel::auto_) const {
    return io::op_of(host_).run(views_, host_, backend, stream, kernel);
  }
  // Fills every output with all-ones bits (NaN in f32, f16 and bf16).
  void poison_outputs();
  // Output `name` as a host tensor.
  io::HostTensor download(const std::string& name) const;
  // All outputs into a copy of the host problem's tensors.
  io::HostProblem download_outputs() const;
  // True when every input's device bytes still equal the host bytes they were uploaded from.
  bool inputs_unchanged(std::string* which) const;

  // For tests that share the GPU between streams or host threads: like poison_outputs, but queued
  // on `stream` with no synchronization; and all outputs copied on `stream` after the work
  // queued there, returning once they have landed. The device must be current.
  void poison_outputs_async(cudaStream_t stream);
  io::HostProblem download_outputs_on(cudaStream_t stream) const;
  int device() const { return device_; }

 private:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  const io::HostProblem& host_;
  int device_;
  std::map<std::string, Buffer> buffers_;
  std::map<std::string, TensorView> views_;
};

// Aborts the test with the CUDA error text when `status` is not cudaSuccess.
void check_cuda(cudaError_t status, const char* what);

}  // namespace kda::testing
