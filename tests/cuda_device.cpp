#include "cuda_device.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace kda::testing {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

namespace {

bool is_output(const io::HostProblem& hp, const std::string& name) {
  for (const std::string& out : hp.output_names()) {
    if (name == out) return true;
  }
  return false;
}

}  // namespace

DeviceProblem::DeviceProblem(const io::HostProblem& host, int device,
                             const std::vector<std::string>& padded)
    : host_(host), device_(device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  for (const auto& [name, tensor] : host.tensors) {
    TensorView view = tensor.view({DeviceType::cuda, device});
    const bool pad = std::find(padded.begin(), padded.end(), name) != padded.end() &&
                     !tensor.shape.empty() && tensor.numel() > 0;
    Buffer buf;
    const size_t item = dtype_size(tensor.dtype);
    if (!pad) {
      buf.bytes = std::max<size_t>(tensor.bytes.size(), 1);
      check_cuda(cudaMalloc(&buf.ptr, buf.bytes), "cudaMalloc");
      check_cuda(
          cudaMemcpy(buf.ptr, tensor.bytes.data(), tensor.bytes.size(), cudaMemcpyHostToDevice),
          "cudaMemcpy H2D");
    } else {
      // Rows of the last dimension are stored `row_stride` elements apart.
      const int64_t row = tensor.shape.back();
      const int64_t row_stride = row + 3;
      const int64_t rows = tensor.numel() / row;
      buf.bytes = static_cast<size_t>(rows * row_stride) * item;
      check_cuda(cudaMalloc(&buf.ptr, buf.bytes), "cudaMalloc");
      check_cuda(cudaMemset(buf.ptr, 0x7f, buf.bytes), "cudaMemset");
      check_cuda(cudaMemcpy2D(buf.ptr, row_stride * item, tensor.bytes.data(), row * item,
                              row * item, rows, cudaMemcpyHostToDevice),
                 "cudaMemcpy2D H2D");
      int64_t stride = row_stride;
      for (int d = view.rank - 2; d >= 0; --d) {
        view.strides[d] = stride;
        stride *= view.shape[d];
      }
    }
    view.data = buf.ptr;
    buffers_[name] = buf;
    views_[name] = view;
  }
}

DeviceProblem::~DeviceProblem() {
  for (auto& [name, buf] : buffers_) cudaFree(buf.ptr);
}

void DeviceProblem::poison_outputs() {
  for (const std::string& name : host_.output_names()) {
    const Buffer& buf = buffers_.at(name);
    check_cuda(cudaMemset(buf.ptr, 0xff, buf.bytes), "cudaMemset poison");
  }
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

io::HostTensor DeviceProblem::download(const std::string& name) const {
  io::HostTensor t = host_.get(name);
  check_cuda(
      cudaMemcpy(t.bytes.data(), buffers_.at(name).ptr, t.bytes.size(), cudaMemcpyDeviceToHost),
      "cudaMemcpy D2H");
  return t;
}

io::HostProblem DeviceProblem::download_outputs() const {
  io::HostProblem out = host_;
  for (const std::string& name : host_.output_names()) out.tensors[name] = download(name);
  return out;
}

void DeviceProblem::poison_outputs_async(cudaStream_t stream) {
  for (const std::string& name : host_.output_names()) {
    const Buffer& buf = buffers_.at(name);
    check_cuda(cudaMemsetAsync(buf.ptr, 0xff, buf.bytes, stream), "cudaMemsetAsync poison");
  }
}

io::HostProblem DeviceProblem::download_outputs_on(cudaStream_t stream) const {
  io::HostProblem out = host_;
  for (const std::string& name : host_.output_names()) {
    io::HostTensor& t = out.tensors[name];
    check_cuda(cudaMemcpyAsync(t.bytes.data(), buffers_.at(name).ptr, t.bytes.size(),
                               cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync D2H");
  }
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize after download");
  return out;
}

bool DeviceProblem::inputs_unchanged(std::string* which) const {
  for (const auto& [name, buf] : buffers_) {
    if (is_output(host_, name)) continue;
    std::vector<uint8_t> now(buf.bytes);
    check_cuda(cudaMemcpy(now.data(), buf.ptr, buf.bytes, cudaMemcpyDeviceToHost), "D2H");
    const io::HostTensor& t = host_.get(name);
    const TensorView& v = views_.at(name);
    const bool padded = !v.is_contiguous();
    if (!padded) {
      if (std::memcmp(now.data(), t.bytes.data(), t.bytes.size()) != 0) {
        *which = name;
        return false;
      }
      continue;
    }
    const size_t item = dtype_size(t.dtype);
    const int64_t row = t.shape.back(), row_stride = row + 3, rows = t.numel() / row;
    for (int64_t r = 0; r < rows; ++r) {
      if (std::memcmp(now.data() + r * row_stride * item, t.bytes.data() + r * row * item,
                      row * item) != 0) {
        *which = name;
        return false;
      }
    }
  }
  return true;
}

}  // namespace kda::testing
