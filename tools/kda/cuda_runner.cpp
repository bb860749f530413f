// Uploads a host problem of any operator, runs the operator on libkda's cuda backend on its own
// stream, times the runs with CUDA events and downloads the outputs. Plain C++ against the CUDA
// runtime API.

#include <cuda_runtime.h>

#include <map>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda_runner.hpp"

namespace kda::cli {

namespace {

constexpr int kDevice = 0;

// Every runtime call is checked; the error names the call and where it was made.
Status cuda_check(cudaError_t err, const char* call,
                  std::source_location where = std::source_location::current()) {
  if (err == cudaSuccess) return Status::Ok();
  std::string_view file = where.file_name();
  if (const size_t slash = file.rfind('/'); slash != std::string_view::npos) {
    file.remove_prefix(slash + 1);
  }
  return {StatusCode::cuda_error, std::string("cuda: ") + call +
                                      " failed: " + cudaGetErrorName(err) + " (" +
                                      cudaGetErrorString(err) + ") at " + std::string(file) + ":" +
                                      std::to_string(where.line())};
}

// Owning device allocation; freed on every path out.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  Status allocate(size_t bytes) { return cuda_check(cudaMalloc(&ptr_, bytes), "cudaMalloc"); }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  Status create() {
    return cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                      "cudaStreamCreateWithFlags");
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Events {
 public:
  Events() = default;
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  ~Events() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  Status create(size_t count) {
    for (size_t i = 0; i < count; ++i) {
      cudaEvent_t e = nullptr;
      if (Status s = cuda_check(cudaEventCreate(&e), "cudaEventCreate"); !s.ok()) return s;
      events_.push_back(e);
    }
    return Status::Ok();
  }
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

}  // namespace

Status cuda_ready() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    return {StatusCode::backend_unavailable,
            std::string("cuda: no CUDA device visible (cudaGetDeviceCount: ") +
                (err == cudaSuccess ? "0 devices" : cudaGetErrorString(err)) + ")"};
  }
  return Status::Ok();
}

Status run_timed_cuda(const io::OpIo& op, Kernel kernel, io::HostProblem* problem, int repeat,
                      Timing* timing) {
  if (Status s = cuda_ready(); !s.ok()) return s;
  if (Status s = cuda_check(cudaSetDevice(kDevice), "cudaSetDevice"); !s.ok()) return s;

  // Upload every tensor, outputs included (poisoned), and view each copy by its name.
  const Device device{DeviceType::cuda, kDevice};
  std::map<std::string, DeviceBuffer> buffers;
  std::map<std::string, TensorView> views;
  for (const auto& [name, host] : problem->tensors) {
    TensorView view = host.view(device);
    view.data = nullptr;  // an empty tensor stays null
    if (!host.bytes.empty()) {
      DeviceBuffer& buffer = buffers[name];
      if (Status s = buffer.allocate(host.bytes.size()); !s.ok()) return s;
      if (Status s = cuda_check(cudaMemcpy(buffer.get(), host.bytes.data(), host.bytes.size(),
                                           cudaMemcpyHostToDevice),
                                "cudaMemcpy (upload)");
          !s.ok()) {
        return s;
      }
      view.data = buffer.get();
    }
    views[name] = view;
  }

  Stream stream;
  if (Status s = stream.create(); !s.ok()) return s;
  const auto run_once = [&] {
    return op.run(views, *problem, Backend::cuda, stream.get(), kernel);
  };
  // Warm-up: first launch costs (module load, caches) stay out of the timing.
  if (Status s = run_once(); !s.ok()) return s;
  if (Status s = cuda_check(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize (warm-up)");
      !s.ok()) {
    return s;
  }

  // A pair of events around each run gives every run's own time, hence a median and a minimum.
  Events events;
  if (Status s = events.create(2 * static_cast<size_t>(repeat)); !s.ok()) return s;
  for (int i = 0; i < repeat; ++i) {
    const size_t start = 2 * static_cast<size_t>(i);
    if (Status s = cuda_check(cudaEventRecord(events[start], stream.get()), "cudaEventRecord");
        !s.ok()) {
      return s;
    }
    if (Status s = run_once(); !s.ok()) return s;
    if (Status s = cuda_check(cudaEventRecord(events[start + 1], stream.get()), "cudaEventRecord");
        !s.ok()) {
      return s;
    }
  }
  if (Status s = cuda_check(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
      !s.ok()) {
    return s;
  }
  timing->ms.clear();
  for (int i = 0; i < repeat; ++i) {
    const size_t start = 2 * static_cast<size_t>(i);
    float ms = 0.0f;
    if (Status s = cuda_check(cudaEventElapsedTime(&ms, events[start], events[start + 1]),
                              "cudaEventElapsedTime");
        !s.ok()) {
      return s;
    }
    timing->ms.push_back(ms);
  }

  for (const std::string& name : problem->output_names()) {
    io::HostTensor& host = problem->get(name);
    if (host.bytes.empty()) continue;
    if (Status s = cuda_check(cudaMemcpy(host.bytes.data(), buffers.at(name).get(),
                                         host.bytes.size(), cudaMemcpyDeviceToHost),
                              "cudaMemcpy (download)");
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

}  // namespace kda::cli
