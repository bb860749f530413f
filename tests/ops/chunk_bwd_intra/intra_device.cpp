#include "intra_device.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "ops/chunk_bwd_intra/backends.hpp"

namespace kda::testing::intra {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

DeviceIntra::DeviceIntra(const HostIntra& host, int device) : host_(host), strided_(host) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  const Device where{DeviceType::cuda, device};
  auto upload = [&](const std::string& name, const void* src, size_t n) {
    Buffer b;
    b.bytes = n;
    check_cuda(cudaMalloc(&b.ptr, n > 0 ? n : 1), "cudaMalloc");
    if (n > 0) check_cuda(cudaMemcpy(b.ptr, src, n, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    buffers_[name] = b;
  };
  for (const auto& [name, bytes] : strided_.storage()) upload(name, bytes.data(), bytes.size());
  for (const char* name : kOutputNames) {
    const io::HostTensor& t = host.get(name);
    upload(name, t.bytes.data(), t.bytes.size());
  }
  auto input = [&](const char* name) {
    if (!host.has(name)) return TensorView{};
    TensorView v = strided_.view(name);
    v.data = buffers_.at(name).ptr;
    v.device = where;
    return v;
  };
  auto output = [&](const char* name) {
    TensorView v = host.get(name).view(where);
    v.data = buffers_.at(name).ptr;
    return v;
  };
  problem_.q = input("q");
  problem_.k = input("k");
  problem_.g = input("g");
  problem_.beta = input("beta");
  problem_.dAqk = input("dAqk");
  problem_.dAkk = input("dAkk");
  problem_.dq = input("dq");
  problem_.dk = input("dk");
  problem_.db = input("db");
  problem_.dg = input("dg");
  problem_.cu_seqlens = input("cu_seqlens");
  problem_.chunk_indices = input("chunk_indices");
  problem_.dq_out = output("dq_out");
  problem_.dk_out = output("dk_out");
  problem_.db_out = output("db_out");
  problem_.dg_out = output("dg_out");
  problem_.chunk_size = host.chunk_size;
  problem_.safe_gate = host.safe_gate;
}

DeviceIntra::~DeviceIntra() {
  for (auto& [name, b] : buffers_) cudaFree(b.ptr);
}

void DeviceIntra::poison_outputs() {
  for (const char* name : kOutputNames) {
    const Buffer& b = buffers_.at(name);
    check_cuda(cudaMemset(b.ptr, 0xff, b.bytes), "cudaMemset poison");
  }
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after poison");
}

std::map<std::string, io::HostTensor> DeviceIntra::download_outputs() const {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize before download");
  std::map<std::string, io::HostTensor> out;
  for (const char* name : kOutputNames) {
    io::HostTensor t = host_.get(name);
    check_cuda(
        cudaMemcpy(t.bytes.data(), buffers_.at(name).ptr, t.bytes.size(), cudaMemcpyDeviceToHost),
        "cudaMemcpy D2H");
    out[name] = std::move(t);
  }
  return out;
}

bool DeviceIntra::inputs_unchanged(std::string* which) const {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize before input check");
  for (const auto& [name, bytes] : strided_.storage()) {
    std::vector<uint8_t> now(bytes.size());
    if (!now.empty()) {
      check_cuda(cudaMemcpy(now.data(), buffers_.at(name).ptr, now.size(), cudaMemcpyDeviceToHost),
                 "cudaMemcpy D2H (input check)");
    }
    if (now != bytes) {
      *which = name;
      return false;
    }
  }
  return true;
}

Status run_cuda(const DeviceIntra& dev, const ChunkBwdIntraDims& dims, cudaStream_t stream) {
  return detail::run_chunk_bwd_intra_cuda(dev.problem(), dims, Kernel::auto_, stream);
}

}  // namespace kda::testing::intra
