// Benchmark of the chunk_bwd_intra CUDA kernel at the model shape (B=1, H=32, K=128, BT=64) for
// T = 8192 and 2048: every kernel variant given, X in bf16 / fp16 / fp32, safe_gate False and
// True; the median of >= 50 CUDA-event timed runs after warm-up, with an L2 flush (a 256 MB
// memset) before every run; bytes, floor (bytes / 4.27 TB/s), median, share of the floor; then
// err_ratio against cpu-ref on a smaller shape (T=512, H=4) per X dtype and variant.
//
//   bench_intra_cuda [--T 8192,2048] [--dtypes bf16,fp16,fp32] [--runs 50]
//                    [--variants "split=1;split=3;split=1,stages=1;split=1,prefetch=0"]
// Variants use IntraVariant::parse syntax (split=1|3, stages=0|1|2, prefetch=0|1, fast=0|1,
// tma=0|1, diag=0|1, grid=0|1), ';'-separated.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/element.hpp"
#include "intra_device.hpp"
#include "intra_problem.hpp"
#include "ops/chunk_bwd_intra/cuda/variant.hpp"

namespace {

using kda::DType;
using kda::cuda::intra::IntraVariant;
using namespace kda::testing::intra;

constexpr double kCopyBandwidth = 4.27e12;  // H200, bytes/s (SPEC)

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

DType parse_dtype(const std::string& s) {
  if (s == "bf16") return DType::bf16;
  if (s == "fp16") return DType::f16;
  if (s == "fp32") return DType::f32;
  throw std::runtime_error("unknown dtype '" + s + "' (bf16, fp16, fp32)");
}

const char* dtype_tag(DType d) {
  return d == DType::f16 ? "fp16" : d == DType::bf16 ? "bf16" : "fp32";
}

// SPEC-chunk-bwd-intra.md's byte count (beta in X).
double problem_bytes(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t BT, DType x) {
  const double xs = x == DType::f32 ? 4.0 : 2.0;
  const double per_token = 2.0 * H * K * xs + HV * K * 4.0 + HV * xs + 2.0 * HV * BT * 4.0 +
                           3.0 * HV * K * 4.0 + HV * 4.0 + 3.0 * HV * K * 4.0 + HV * 4.0;
  return per_token * static_cast<double>(B * T);
}

// A large problem filled fast (timing does not depend on the values beyond their ranges): q, k
// about unit-norm rows, g a chunk-local cumsum of log2 decays with every fourth channel strong,
// dA lower-inclusive, incoming gradients small.
HostIntra fast_problem(int64_t T, int64_t H, int64_t K, int64_t BT, DType x) {
  HostIntra hp;
  hp.chunk_size = BT;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto uniform = [&]() {  // splitmix64 -> [0, 1)
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  auto normal = [&]() { return (uniform() + uniform() + uniform() - 1.5) * 2.0; };
  auto fill = [&](const char* name, DType d, std::vector<int64_t> shape, auto value) {
    kda::io::HostTensor t(d, std::move(shape));
    const kda::TensorView v = t.view();
    for (int64_t i = 0; i < t.numel(); ++i) kda::store_float(v, i, static_cast<float>(value(i)));
    hp.tensors[name] = std::move(t);
  };
  const double inv_sqrt_k = 1.0 / std::sqrt(static_cast<double>(K));
  fill("q", x, {1, T, H, K}, [&](int64_t) { return normal() * inv_sqrt_k; });
  fill("k", x, {1, T, H, K}, [&](int64_t) { return normal() * inv_sqrt_k; });
  std::vector<double> running(static_cast<size_t>(H * K), 0.0);
  fill("g", DType::f32, {1, T, H, K}, [&](int64_t i) {
    const int64_t hk = i % (H * K);
    const int64_t t = i / (H * K);
    if (t % BT == 0) running[static_cast<size_t>(hk)] = 0.0;
    const double ln_decay = hk % 4 == 1 ? -4.6 - 0.4 * uniform() : -0.5 * uniform();
    return running[static_cast<size_t>(hk)] += ln_decay / 0.6931471805599453;
  });
  fill("beta", x, {1, T, H}, [&](int64_t) { return 0.05 + 0.9 * uniform(); });
  for (const char* name : {"dAqk", "dAkk"}) {
    fill(name, DType::f32, {1, T, H, BT}, [&](int64_t i) {
      const int64_t j = i % BT;
      const int64_t row = i / (H * BT) % BT;
      return j <= row ? normal() : 0.0;
    });
  }
  fill("dq", DType::f32, {1, T, H, K}, [&](int64_t) { return 0.1 * normal(); });
  fill("dk", DType::f32, {1, T, H, K}, [&](int64_t) { return 0.1 * normal(); });
  fill("db", DType::f32, {1, T, H}, [&](int64_t) { return 0.1 * normal(); });
  fill("dg", DType::f32, {1, T, H, K}, [&](int64_t) { return 0.02 * normal(); });
  hp.allocate_outputs();
  return hp;
}

struct Timing {
  double median_us, min_us, p90_us;
};

Timing time_runs(const DeviceIntra& dev, const kda::ChunkBwdIntraDims& dims,
                 const IntraVariant& variant, int runs, void* flush, size_t flush_bytes) {
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  auto run_once = [&]() {
    const kda::Status s =
        kda::detail::run_chunk_bwd_intra_cuda_variant(dev.problem(), dims, nullptr, variant);
    if (!s.ok()) throw std::runtime_error("run failed: " + s.message);
  };
  for (int i = 0; i < 3; ++i) run_once();  // warm-up (attribute setup, occupancy query)
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    check_cuda(cudaMemsetAsync(flush, i & 0xff, flush_bytes, nullptr), "L2 flush");
    check_cuda(cudaEventRecord(start, nullptr), "cudaEventRecord");
    run_once();
    check_cuda(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    us.push_back(1000.0 * ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), us[us.size() * 9 / 10]};
}

void accuracy(DType x, const IntraVariant& variant, bool safe_gate) {
  Config c;
  c.T = 512;
  c.H = 4;
  c.K = 128;
  c.BT = 64;
  c.x_dtype = x;
  c.beta_dtype = x;
  c.safe_gate = safe_gate;
  c.seed = 20261201;
  HostIntra hp = make_random(c);
  HostIntra ref = hp;
  if (!run_cpu_backend(CpuBackend::cpu_ref, ref).ok()) throw std::runtime_error("cpu-ref failed");
  DeviceIntra dev(hp);
  dev.poison_outputs();
  const kda::Status s =
      kda::detail::run_chunk_bwd_intra_cuda_variant(dev.problem(), hp.dims(), nullptr, variant);
  if (!s.ok()) throw std::runtime_error("run failed: " + s.message);
  const auto got = dev.download_outputs();
  std::printf("  accuracy X=%s %-30s safe_gate=%d (T=512 H=4 K=128 BT=64, bar %.1e):", dtype_tag(x),
              variant.describe().c_str(), safe_gate ? 1 : 0, pass_bar(x));
  bool pass = true;
  for (const char* name : kOutputNames) {
    const double err = kda::io::err_ratio(got.at(name), ref.get(name));
    pass = pass && err <= pass_bar(x);
    std::printf(" %s %.2e", spec_name(name).c_str(), err);
  }
  std::printf("  %s\n", pass ? "PASS" : "FAIL");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> Ts = {8192, 2048};
  std::vector<DType> dtypes = {DType::bf16, DType::f16, DType::f32};
  std::string variant_text = "split=1;split=3;split=1,stages=1;split=1,prefetch=0";
  int runs = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--T") {
      Ts.clear();
      for (const std::string& t : split_list(value, ',')) Ts.push_back(std::stoll(t));
    } else if (flag == "--dtypes") {
      dtypes.clear();
      for (const std::string& d : split_list(value, ',')) dtypes.push_back(parse_dtype(d));
    } else if (flag == "--variants") {
      variant_text = value;
    } else if (flag == "--runs") {
      runs = std::max(50, std::stoi(value));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::vector<IntraVariant> variants;
  for (const std::string& v : split_list(variant_text, ';')) {
    IntraVariant parsed;
    if (!IntraVariant::parse(v, &parsed)) {
      std::fprintf(stderr, "bad variant '%s'\n", v.c_str());
      return 2;
    }
    variants.push_back(parsed);
  }
  if (cuda_device_count() == 0) {
    std::printf("no CUDA device visible: nothing to benchmark\n");
    return 0;
  }
  try {
    const size_t flush_bytes = size_t{256} << 20;
    void* flush = nullptr;
    check_cuda(cudaMalloc(&flush, flush_bytes), "cudaMalloc (L2 flush buffer)");
    constexpr int64_t H = 32, K = 128, BT = 64;
    for (int64_t T : Ts) {
      for (DType x : dtypes) {
        HostIntra hp = fast_problem(T, H, K, BT, x);
        const double bytes = problem_bytes(1, T, H, H, K, BT, x);
        const double floor_us = bytes / kCopyBandwidth * 1e6;
        DeviceIntra dev(hp);
        const kda::ChunkBwdIntraDims dims = hp.dims();
        for (const IntraVariant& variant : variants) {
          for (bool safe_gate : {false, true}) {
            dev.set_safe_gate(safe_gate);
            const Timing tm = time_runs(dev, dims, variant, runs, flush, flush_bytes);
            std::printf(
                "T=%-5lld X=%-4s safe_gate=%d %-30s bytes %7.1f MB  floor %6.1f us  median %7.1f "
                "us (min %7.1f, p90 %7.1f)  share of floor %5.1f%%\n",
                static_cast<long long>(T), dtype_tag(x), safe_gate ? 1 : 0,
                variant.describe().c_str(), bytes / 1e6, floor_us, tm.median_us, tm.min_us,
                tm.p90_us, 100.0 * floor_us / tm.median_us);
            std::fflush(stdout);
          }
        }
      }
    }
    cudaFree(flush);
    for (DType x : dtypes) {
      for (const IntraVariant& variant : variants) {
        for (bool safe_gate : {false, true}) accuracy(x, variant, safe_gate);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_intra_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
