// Uploads a host problem, runs libkda's cuda backend on its own stream, times the runs with CUDA
// events and downloads the outputs. Plain C++ against the CUDA runtime API.

#include <cuda_runtime.h>

#include <map>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda_runner.hpp"
#include "kda/run.hpp"

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

// The Problem field that carries each tensor of a HostProblem.
const std::pair<const char*, TensorView Problem::*> kFields[] = {
    {"q", &Problem::q},
    {"k", &Problem::k},
    {"v", &Problem::v},
    {"v_new", &Problem::v_new},
    {"g", &Problem::g},
    {"beta", &Problem::beta},
    {"A", &Problem::A},
    {"h", &Problem::h},
    {"do", &Problem::do_},
    {"dh", &Problem::dh},
    {"dv", &Problem::dv},
    {"cu_seqlens", &Problem::cu_seqlens},
    {"chunk_indices", &Problem::chunk_indices},
    {"dq", &Problem::dq},
    {"dk", &Problem::dk},
    {"dv_out", &Problem::dv_out},
    {"db", &Problem::db},
    {"dg", &Problem::dg},
    {"dA", &Problem::dA},
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

Status run_timed_cuda(io::HostProblem* problem, int repeat, Timing* timing) {
  if (Status s = cuda_ready(); !s.ok()) return s;
  if (Status s = cuda_check(cudaSetDevice(kDevice), "cudaSetDevice"); !s.ok()) return s;

  // Upload every tensor, outputs included (poisoned), and point the views at the copies.
  const Device device{DeviceType::cuda, kDevice};
  Problem p = problem->problem();
  std::map<std::string, DeviceBuffer> buffers;
  for (const auto& [name, member] : kFields) {
    if (!problem->has(name)) continue;
    const io::HostTensor& host = problem->get(name);
    TensorView& view = p.*member;
    view.device = device;
    view.data = nullptr;  // an empty tensor stays null, as on the host
    if (host.bytes.empty()) continue;
    DeviceBuffer& buffer = buffers[name];
    if (Status s = buffer.allocate(host.bytes.size()); !s.ok()) return s;
    if (Status s = cuda_check(
            cudaMemcpy(buffer.get(), host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice),
            "cudaMemcpy (upload)");
        !s.ok()) {
      return s;
    }
    view.data = buffer.get();
  }

  Stream stream;
  if (Status s = stream.create(); !s.ok()) return s;
  // Warm-up: first launch costs (module load, caches) stay out of the timing.
  if (Status s = run(p, Backend::cuda, stream.get()); !s.ok()) return s;
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
    if (Status s = run(p, Backend::cuda, stream.get()); !s.ok()) return s;
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

  for (const char* name : io::kOutputNames) {
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
