// GPU reliability of the cuda backend, beyond the option matrix of test_wy_cuda.cpp:
// - concurrency: two problems on two streams at once, four host threads on their own streams or
//   on one shared stream, all give the bits of serial runs;
// - several GPUs: tensors on cuda:1 run there while device 0 is current, the caller's device is
//   the same afterwards, device 0 sees no work, no allocation and no write;
// - huge shapes: tensors past 2^31 elements (and 2^31 / 2^32 bytes) agree with cpu-ref on the
//   chunks around those boundaries;
// - NaN / Inf reach exactly the outputs cpu-ref's do, and nothing outside their chunk and heads;
//   extreme gates stay finite wherever cpu-ref is;
// - garbage device-resident cu_seqlens / chunk_indices never fault, and skip exactly the units
//   docs/design.md says (compute-sanitizer memcheck runs the DeviceIndexGarbage tests).
// Each test skips, saying why, when its hardware is missing: no GPU, one GPU, too little memory.
// Every run asks for the kernel KDA_CUDA_KERNEL names (auto when unset): this program reads it, as
// the library reads no environment, so that dev/gpu-check.sh runs the suite once per kernel.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda_device.hpp"
#include "io/host_problem.hpp"
#include "kda/kda.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::DType;
using Problem = kda::ChunkBwdWyDqkgProblem;
using kda::StatusCode;
using kda::TensorView;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::io::WyDqkgConfig;
using kda::testing::bitwise_equal;
using kda::testing::check_cuda;
using kda::testing::chunk_of;
using kda::testing::Coords;
using kda::testing::coords_of;
using kda::testing::DeviceProblem;
using kda::testing::fresh_seed;
using kda::testing::reference_of;
using kda::testing::use_int32_indices;

// The kernel of every run here: KDA_CUDA_KERNEL's, read once (an unknown name fails the run).
kda::Kernel run_kernel() {
  static const kda::Kernel kernel = [] {
    kda::Kernel k = kda::Kernel::auto_;
    const char* env = std::getenv("KDA_CUDA_KERNEL");
    if (env != nullptr && *env != '\0' &&
        !kda::parse_kernel(env, &k, "environment variable KDA_CUDA_KERNEL").ok()) {
      std::fprintf(stderr, "test_cuda_reliability: KDA_CUDA_KERNEL=%s names no kernel\n", env);
      std::abort();
    }
    return k;
  }();
  return kernel;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

#define SKIP_WITHOUT_TWO_GPUS()                                                           \
  if (const int gpus = kda::testing::cuda_device_count(); gpus < 2) {                     \
    GTEST_SKIP() << "needs two CUDA devices, " << gpus                                    \
                 << " visible: multi-GPU test skipped (runs on a machine with two GPUs)"; \
  }

// --- shared helpers --------------------------------------------------------------------------

WyDqkgConfig config_of(DType x, DType h, int64_t BT, int64_t B, int64_t T, int64_t H, int64_t HV,
                       int64_t K, int64_t V) {
  WyDqkgConfig c;
  c.B = B;
  c.T = T;
  c.H = H;
  c.HV = HV;
  c.K = K;
  c.V = V;
  c.BT = BT;
  c.x_dtype = x;
  c.h_dtype = h;
  c.beta_dtype = x;
  return c;
}

WyDqkgConfig varlen_of(WyDqkgConfig c, std::vector<int64_t> seqlens, bool pass_chunk_indices) {
  c.B = 1;
  c.T = 0;
  for (int64_t len : seqlens) c.T += len;
  c.seqlens = std::move(seqlens);
  c.pass_chunk_indices = pass_chunk_indices;
  return c;
}

// Poisons the outputs, runs on `stream` and downloads them; the problem's device must be current.
HostProblem run_on(DeviceProblem& dev, cudaStream_t stream) {
  dev.poison_outputs_async(stream);
  const kda::Status s =
      kda::run(dev.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, stream, run_kernel());
  if (!s.ok()) throw std::runtime_error("cuda run failed: " + s.message);
  return dev.download_outputs_on(stream);
}

// The poison of DeviceProblem: every byte 0xff.
bool is_poison(const HostTensor& t, int64_t i) {
  const size_t n = kda::dtype_size(t.dtype);
  for (size_t b = 0; b < n; ++b) {
    if (t.bytes[static_cast<size_t>(i) * n + b] != 0xff) return false;
  }
  return true;
}

int64_t count_poison(const HostProblem& out) {
  int64_t count = 0;
  for (const std::string& name : kda::testing::wy_outputs()) {
    const HostTensor& t = out.get(name);
    for (int64_t i = 0; i < t.numel(); ++i) count += is_poison(t, i) ? 1 : 0;
  }
  return count;
}

// "name[i]" of the first output element whose bits differ; empty when all six are identical.
std::string first_difference(const HostProblem& a, const HostProblem& b) {
  for (const std::string& name : kda::testing::wy_outputs()) {
    const HostTensor& x = a.get(name);
    const HostTensor& y = b.get(name);
    if (x.bytes.size() != y.bytes.size()) return std::string(name) + " (size)";
    if (x.bytes == y.bytes) continue;
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (!bitwise_equal(x, y, i)) {
        return std::string(name) + "[" + std::to_string(i) + "] (" + std::to_string(x.at(i)) +
               " vs " + std::to_string(y.at(i)) + ")";
      }
    }
  }
  return "";
}

// Per output: err_ratio over the elements where `ref` is finite, and how many of those are not
// finite (or still poisoned) in `got`.
struct FiniteCompare {
  double err = 0.0;
  int64_t not_finite = 0;
  int64_t first_bad = -1;
};
FiniteCompare compare_where_finite(const HostTensor& got, const HostTensor& ref) {
  FiniteCompare c;
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.at(i);
    if (!std::isfinite(r)) continue;
    const double g = got.at(i);
    if (!std::isfinite(g)) {
      if (c.not_finite++ == 0) c.first_bad = i;
      continue;
    }
    num += (g - r) * (g - r);
    den += r * r;
  }
  c.err = den > 0.0 ? std::sqrt(num / den) : (num == 0.0 ? 0.0 : kInf);
  return c;
}

void expect_matches_reference(const HostProblem& out, const HostProblem& ref,
                              const std::string& what) {
  const double bar = kda::io::pass_bar(ref.get("q").dtype);
  for (const std::string& name : kda::testing::wy_outputs()) {
    const HostTensor& got = out.get(name);
    int64_t poisoned = 0;
    for (int64_t i = 0; i < got.numel(); ++i) poisoned += is_poison(got, i) ? 1 : 0;
    EXPECT_EQ(poisoned, 0) << what << ": " << name << " has " << poisoned
                           << " elements never written";
    const FiniteCompare c = compare_where_finite(got, ref.get(name));
    EXPECT_EQ(c.not_finite, 0) << what << ": " << name << "[" << c.first_bad
                               << "] is not finite where cpu-ref is";
    EXPECT_LE(c.err, bar) << what << ": " << name << " err_ratio " << c.err << " above the bar "
                          << bar;
  }
}

// Makes `device` current for a scope, restoring the previous one.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    check_cuda(cudaGetDevice(&saved_), "cudaGetDevice");
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~CurrentDevice() { cudaSetDevice(saved_); }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int saved_ = 0;
};

int current_device() {
  int device = -1;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

cudaStream_t make_stream() {
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return stream;
}

// --- 1. concurrency --------------------------------------------------------------------------

// Four different problems (every X dtype, h in X and in float32, all three chunk sizes, varlen
// with device-resident int32 indices, GVA, state_v_first; the bf16 ones with K = V = 128 take the
// tensor-core path under KDA_CUDA_KERNEL=auto). These kernel variants are used by no earlier
// test in this file, so the threads also race on their first-use setup (the per-device
// shared-memory opt-in).
std::vector<WyDqkgConfig> thread_configs(uint64_t seed) {
  std::vector<WyDqkgConfig> c;
  c.push_back(config_of(DType::bf16, DType::bf16, 32, 1, 1500, 4, 8, 128, 128));
  c.push_back(varlen_of(config_of(DType::f16, DType::f16, 16, 1, 0, 2, 4, 64, 64),
                        {300, 1, 517, 64, 2}, true));
  c.push_back(config_of(DType::f32, DType::f32, 64, 2, 700, 2, 6, 96, 80));
  c.push_back(config_of(DType::bf16, DType::f32, 64, 1, 1200, 8, 8, 128, 128));
  c.back().state_v_first = true;
  for (size_t i = 0; i < c.size(); ++i) c[i].seed = seed + i;
  return c;
}

// Builds the problems of `configs` on device 0 (the second one with int32 indices).
struct ThreadProblems {
  std::vector<std::unique_ptr<HostProblem>> hosts;  // DeviceProblem keeps a reference: stable
  std::vector<std::unique_ptr<DeviceProblem>> devices;

  explicit ThreadProblems(const std::vector<WyDqkgConfig>& configs) {
    for (size_t i = 0; i < configs.size(); ++i) {
      hosts.push_back(std::make_unique<HostProblem>(kda::io::make_random_problem(configs[i])));
      if (i == 1) use_int32_indices(*hosts.back());
      devices.push_back(std::make_unique<DeviceProblem>(*hosts.back(), 0));
    }
  }
};

constexpr int kThreadIterations = 8;

// Each of `streams.size()` host threads runs its own problem kThreadIterations times on its
// stream; returns each thread's first outputs, and any error in `errors`.
std::vector<HostProblem> run_threads(ThreadProblems& problems,
                                     const std::vector<cudaStream_t>& streams,
                                     std::vector<std::string>* errors) {
  const size_t n = problems.devices.size();
  std::vector<HostProblem> first(n);
  errors->assign(n, "");
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        check_cuda(cudaSetDevice(0), "cudaSetDevice in a thread");
        for (int it = 0; it < kThreadIterations; ++it) {
          HostProblem out = run_on(*problems.devices[i], streams[i]);
          if (it == 0) {
            first[i] = std::move(out);
            continue;
          }
          const std::string diff = first_difference(first[i], out);
          if (!diff.empty()) {
            (*errors)[i] =
                "iteration " + std::to_string(it) + ": " + diff + " differs from iteration 0";
            return;
          }
        }
      } catch (const std::exception& e) {
        (*errors)[i] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return first;
}

// Serial runs, one problem at a time with the device idle in between, must give the bits the
// concurrent runs gave.
void expect_serial_bits(ThreadProblems& problems, const std::vector<HostProblem>& concurrent) {
  cudaStream_t stream = make_stream();
  for (size_t i = 0; i < problems.devices.size(); ++i) {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const HostProblem serial = run_on(*problems.devices[i], stream);
    EXPECT_EQ(count_poison(serial), 0) << "problem " << i << ": outputs left unwritten";
    EXPECT_EQ(first_difference(serial, concurrent[i]), "")
        << "problem " << i << ": the concurrent run differs from the serial run";
  }
  cudaStreamDestroy(stream);
}

TEST(Concurrency, FourHostThreadsOnTheirOwnStreamsGetSerialBits) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  ThreadProblems problems(thread_configs(seed));
  std::vector<cudaStream_t> streams;
  for (size_t i = 0; i < problems.devices.size(); ++i) streams.push_back(make_stream());
  std::vector<std::string> errors;
  const std::vector<HostProblem> concurrent = run_threads(problems, streams, &errors);
  for (size_t i = 0; i < errors.size(); ++i) {
    EXPECT_EQ(errors[i], "") << "thread " << i;
  }
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
  if (!HasFailure()) expect_serial_bits(problems, concurrent);
}

// All four threads queue on one stream (a created one, and the legacy default stream): the host
// calls race, the kernels run one after another.
class SharedStream : public ::testing::TestWithParam<bool> {};

TEST_P(SharedStream, FourHostThreadsGetSerialBits) {
  SKIP_WITHOUT_GPU();
  const bool legacy = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  ThreadProblems problems(thread_configs(seed));
  cudaStream_t shared = legacy ? nullptr : make_stream();
  const std::vector<cudaStream_t> streams(problems.devices.size(), shared);
  std::vector<std::string> errors;
  const std::vector<HostProblem> concurrent = run_threads(problems, streams, &errors);
  for (size_t i = 0; i < errors.size(); ++i) {
    EXPECT_EQ(errors[i], "") << "thread " << i;
  }
  if (!legacy) cudaStreamDestroy(shared);
  if (!HasFailure()) expect_serial_bits(problems, concurrent);
}

INSTANTIATE_TEST_SUITE_P(Concurrency, SharedStream, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "legacy_default_stream" : "created_stream");
                         });

TEST(Concurrency, TwoProblemsOnTwoStreamsAtOnceGetSerialBits) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  // A: 1024 units of K = V = 128 bf16 (tensor-core path under auto); B: float32 varlen with
  // device-resident cu_seqlens (the general kernel's scan), different BT and head dims.
  WyDqkgConfig ca = config_of(DType::bf16, DType::f32, 64, 2, 2048, 8, 16, 128, 128);
  ca.seed = seed;
  WyDqkgConfig cb = varlen_of(config_of(DType::f32, DType::f32, 32, 1, 0, 4, 8, 64, 32),
                              {1000, 1, 700, 333, 64}, false);
  cb.seed = seed + 1;
  const HostProblem ha = kda::io::make_random_problem(ca);
  const HostProblem hb = kda::io::make_random_problem(cb);
  DeviceProblem da(ha, 0);
  DeviceProblem db(hb, 0);
  cudaStream_t s1 = make_stream();
  cudaStream_t s2 = make_stream();
  const HostProblem serial_a = run_on(da, s1);
  const HostProblem serial_b = run_on(db, s2);
  EXPECT_EQ(count_poison(serial_a), 0);
  EXPECT_EQ(count_poison(serial_b), 0);
  for (int it = 0; it < 10 && !HasFailure(); ++it) {
    da.poison_outputs_async(s1);
    db.poison_outputs_async(s2);
    // Alternate which is queued first; nothing synchronizes until both are queued.
    kda::Status first, second;
    if (it % 2 == 0) {
      first = kda::run(da.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, s1, run_kernel());
      second = kda::run(db.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, s2, run_kernel());
    } else {
      second = kda::run(db.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, s2, run_kernel());
      first = kda::run(da.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, s1, run_kernel());
    }
    ASSERT_TRUE(first.ok()) << first.message;
    ASSERT_TRUE(second.ok()) << second.message;
    const HostProblem out_a = da.download_outputs_on(s1);
    const HostProblem out_b = db.download_outputs_on(s2);
    EXPECT_EQ(first_difference(out_a, serial_a), "") << "problem A, iteration " << it;
    EXPECT_EQ(first_difference(out_b, serial_b), "") << "problem B, iteration " << it;
  }
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// --- 2. huge shapes --------------------------------------------------------------------------
//
// Inputs are periodic with an odd period P: element e of a tensor is pool[(e + offset) % P]
// (each tensor its own random pool and offset). They are filled on the device by copies out of
// a device copy of the pool, and the reference reads the same pools, so nothing of the full size
// ever exists on the host. An odd P is coprime to every power of two, so a kernel that reads
// element e ± 2^31 or e ± 2^32 (a 32-bit offset overflow) reads different values. cpu-ref runs on
// a small varlen problem made of the sampled chunks only (one sequence each, h and dh gathered),
// and only their rows of the outputs are downloaded.

constexpr int64_t kPeriod = (int64_t{1} << 22) + 15;
constexpr int64_t kPiece = int64_t{1} << 21;  // longest run read out of a pool at once

enum class Draw { normal, small_normal, gate, beta };

struct BigTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // [1, T, heads, cols] / [1, T, HV] / [1, NT, HV, K, V]
  bool per_chunk = false;      // h, dh: dim 1 is the chunk; else the token
  bool output = false;
  Draw draw = Draw::normal;
  // Filled by the test:
  HostTensor pool;  // inputs: kPeriod + kPiece elements, pool[i] = pool[i % kPeriod]
  int64_t offset = 0;
  std::shared_ptr<void> device;  // the full tensor
  std::shared_ptr<void> device_pool;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t item() const { return kda::dtype_size(dtype); }
  size_t bytes() const { return static_cast<size_t>(numel()) * item(); }
  int64_t run() const { return numel() / shape[1]; }  // elements per token (or chunk)
};

struct HugeCase {
  std::string name;
  int64_t T, H, HV, K, V, BT;
  DType x, h;
};

// Printed by its name (gtest would print a hex dump of the struct in every test listing and skip
// line).
void PrintTo(const HugeCase& c, std::ostream* out) {
  *out << c.name;
}

std::string huge_case_name(const ::testing::TestParamInfo<HugeCase>& p) {
  return p.param.name;
}

std::vector<BigTensor> big_tensors(const HugeCase& c) {
  const int64_t NT = (c.T + c.BT - 1) / c.BT;
  auto token = [&](const char* name, DType dtype, int64_t heads, int64_t cols, Draw draw,
                   bool output) {
    BigTensor t;
    t.name = name;
    t.dtype = dtype;
    t.shape =
        cols > 0 ? std::vector<int64_t>{1, c.T, heads, cols} : std::vector<int64_t>{1, c.T, heads};
    t.draw = draw;
    t.output = output;
    return t;
  };
  std::vector<BigTensor> t;
  t.push_back(token("q", c.x, c.H, c.K, Draw::normal, false));
  t.push_back(token("k", c.x, c.H, c.K, Draw::normal, false));
  for (const char* name : {"v", "v_new", "do", "dv"}) {
    t.push_back(token(name, c.x, c.HV, c.V, Draw::normal, false));
  }
  t.push_back(token("g", DType::f32, c.HV, c.K, Draw::gate, false));
  t.push_back(token("beta", DType::f32, c.HV, 0, Draw::beta, false));
  t.push_back(token("A", c.x, c.HV, c.BT, Draw::small_normal, false));
  for (const char* name : {"h", "dh"}) {
    BigTensor s;
    s.name = name;
    s.dtype = c.h;
    s.shape = {1, NT, c.HV, c.K, c.V};
    s.per_chunk = true;
    t.push_back(s);
  }
  for (const char* name : {"out.dq", "out.dk", "out.dg"}) {
    t.push_back(token(name, DType::f32, c.HV, c.K, Draw::normal, true));
  }
  t.push_back(token("out.dv_out", c.x, c.HV, c.V, Draw::normal, true));
  t.push_back(token("out.db", DType::f32, c.HV, 0, Draw::normal, true));
  t.push_back(token("out.dA", DType::f32, c.HV, c.BT, Draw::normal, true));
  return t;
}

void fill_pool(BigTensor& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  t.pool = HostTensor(t.dtype, {kPeriod + kPiece});
  for (int64_t i = 0; i < kPeriod; ++i) {
    double value = 0.0;
    switch (t.draw) {
      case Draw::normal:
        value = normal(rng);
        break;
      case Draw::small_normal:
        value = 0.1 * normal(rng);
        break;
      case Draw::gate:
        value = -(0.05 + 2.45 * uniform(rng));
        break;
      case Draw::beta:
        value = 0.05 + 0.9 * uniform(rng);
        break;
    }
    t.pool.set(i, value);
  }
  std::memcpy(t.pool.bytes.data() + kPeriod * t.item(), t.pool.bytes.data(), kPiece * t.item());
  t.offset = static_cast<int64_t>(rng() % static_cast<uint64_t>(kPeriod));
}

// Copies unit `unit` (a token, or a chunk of h/dh) of the periodic tensor `t` into unit `dst_unit`
// of the host tensor `dst`.
void copy_unit(const BigTensor& t, int64_t unit, HostTensor& dst, int64_t dst_unit) {
  const int64_t run = t.run();
  const int64_t start = (unit * run + t.offset) % kPeriod;
  std::memcpy(dst.bytes.data() + dst_unit * run * t.item(), t.pool.bytes.data() + start * t.item(),
              static_cast<size_t>(run) * t.item());
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

class Past2To31Elements : public ::testing::TestWithParam<HugeCase> {};

TEST_P(Past2To31Elements, AgreeWithReferenceOnChunksAroundTheBoundaries) {
  SKIP_WITHOUT_GPU();
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const Clock::time_point start = Clock::now();
  const HugeCase c = GetParam();
  const int64_t NT = (c.T + c.BT - 1) / c.BT;
  std::vector<BigTensor> tensors = big_tensors(c);
  int64_t largest = 0;
  size_t needed = 0;
  for (const BigTensor& t : tensors) {
    largest = std::max(largest, t.numel());
    needed += t.bytes() + (t.output ? 0 : static_cast<size_t>(kPeriod + kPiece) * t.item());
  }
  ASSERT_GT(largest, int64_t{1} << 31) << "the case must hold a tensor past 2^31 elements";
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  constexpr size_t kGiB = size_t{1} << 30;
  if (free_bytes < needed + 2 * kGiB) {
    GTEST_SKIP() << "needs " << (needed + 2 * kGiB) / kGiB << " GiB of free device memory, "
                 << free_bytes / kGiB << " GiB free: huge-shape test skipped";
  }
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("    %s: largest tensor %lld elements, %.1f GiB on the device\n", c.name.c_str(),
              static_cast<long long>(largest), static_cast<double>(needed) / kGiB);

  // Pools, one host thread per input.
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].output) continue;
      threads.emplace_back([&tensors, i, seed] { fill_pool(tensors[i], seed + 7919 * i); });
    }
    for (std::thread& t : threads) t.join();
  }
  cudaStream_t stream = make_stream();
  auto allocate = [](size_t bytes, std::shared_ptr<void>* out) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    *out = std::shared_ptr<void>(p, CudaFree{});
    return true;
  };
  for (BigTensor& t : tensors) {
    if (!allocate(t.bytes(), &t.device)) {
      cudaStreamDestroy(stream);
      GTEST_SKIP() << "cudaMalloc of " << t.name << " (" << t.bytes() / kGiB
                   << " GiB) failed: huge-shape test skipped";
    }
    if (t.output) {
      check_cuda(cudaMemsetAsync(t.device.get(), 0xff, t.bytes(), stream), "poison");
      continue;
    }
    if (!allocate(t.pool.bytes.size(), &t.device_pool)) {
      cudaStreamDestroy(stream);
      GTEST_SKIP() << "cudaMalloc of a pool failed: huge-shape test skipped";
    }
    check_cuda(cudaMemcpy(t.device_pool.get(), t.pool.bytes.data(), t.pool.bytes.size(),
                          cudaMemcpyHostToDevice),
               "pool H2D");
    auto* dst = static_cast<uint8_t*>(t.device.get());
    const auto* src = static_cast<const uint8_t*>(t.device_pool.get());
    for (int64_t e0 = 0; e0 < t.numel(); e0 += kPiece) {
      const int64_t n = std::min(kPiece, t.numel() - e0);
      const int64_t from = (e0 + t.offset) % kPeriod;
      check_cuda(
          cudaMemcpyAsync(dst + e0 * t.item(), src + from * t.item(),
                          static_cast<size_t>(n) * t.item(), cudaMemcpyDeviceToDevice, stream),
          "fill D2D");
    }
  }
  check_cuda(cudaStreamSynchronize(stream), "fill");
  for (BigTensor& t : tensors) t.device_pool.reset();
  std::printf("    filled in %.1f s\n", seconds_since(start));

  auto find = [&](const std::string& name) -> BigTensor& {
    for (BigTensor& t : tensors) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  };
  auto view = [&](const char* name) {
    const BigTensor& t = find(name);
    TensorView v;
    v.data = t.device.get();
    v.dtype = t.dtype;
    v.rank = static_cast<int32_t>(t.shape.size());
    v.device = {kda::DeviceType::cuda, 0};
    int64_t stride = 1;
    for (int d = v.rank - 1; d >= 0; --d) {
      v.shape[d] = t.shape[d];
      v.strides[d] = stride;
      stride *= t.shape[d];
    }
    return v;
  };
  Problem p;
  for (const auto& arg : Problem::args()) {
    if (arg.info.role != kda::ArgRole::optional) arg.of(p) = view(arg.info.name);
  }
  p.chunk_size = c.BT;
  const Clock::time_point launched = Clock::now();
  const kda::Status s = kda::run(p, Backend::cuda, stream, run_kernel());
  ASSERT_TRUE(s.ok()) << s.message;
  const cudaError_t synced = cudaStreamSynchronize(stream);
  ASSERT_EQ(synced, cudaSuccess) << cudaGetErrorString(synced);
  std::printf("    kernel %.3f s\n", seconds_since(launched));

  // Sampled chunks: the first and last, and those holding element 2^31 and bytes 2^31, 2^32 of
  // every tensor, with both neighbours of the largest tensor's element 2^31.
  std::set<int64_t> chunks{0, NT - 1};
  auto chunk_of_element = [&](const BigTensor& t, int64_t e) {
    const int64_t unit = e / t.run();
    return t.per_chunk ? unit : unit / c.BT;
  };
  for (const BigTensor& t : tensors) {
    const int64_t item = static_cast<int64_t>(t.item());
    for (int64_t e : {int64_t{1} << 31, (int64_t{1} << 31) / item, (int64_t{1} << 32) / item}) {
      if (e < t.numel()) chunks.insert(chunk_of_element(t, e));
    }
    if (t.numel() == largest) {
      const int64_t b = chunk_of_element(t, int64_t{1} << 31);
      chunks.insert(std::max<int64_t>(b - 1, 0));
      chunks.insert(std::min<int64_t>(b + 1, NT - 1));
    }
  }
  struct Sample {
    int64_t chunk, t0, len, small_t0, index;
  };
  std::vector<Sample> samples;
  int64_t Ts = 0;
  for (int64_t chunk : chunks) {
    const int64_t t0 = chunk * c.BT;
    const int64_t len = std::min(c.BT, c.T - t0);
    samples.push_back({chunk, t0, len, Ts, static_cast<int64_t>(samples.size())});
    Ts += len;
  }
  std::string listed;
  for (const Sample& sm : samples) listed += " " + std::to_string(sm.chunk);
  std::printf("    sampled chunks (of %lld):%s\n", static_cast<long long>(NT), listed.c_str());

  // The small problem: one sequence per sampled chunk.
  HostProblem small;
  for (const BigTensor& t : tensors) {
    if (t.output) continue;
    std::vector<int64_t> shape = t.shape;
    shape[1] = t.per_chunk ? static_cast<int64_t>(samples.size()) : Ts;
    HostTensor host(t.dtype, shape);
    for (const Sample& sm : samples) {
      if (t.per_chunk) {
        copy_unit(t, sm.chunk, host, sm.index);
      } else {
        for (int64_t i = 0; i < sm.len; ++i) copy_unit(t, sm.t0 + i, host, sm.small_t0 + i);
      }
    }
    small.tensors[t.name] = std::move(host);
  }
  HostTensor cu(DType::i64, {static_cast<int64_t>(samples.size()) + 1});
  for (const Sample& sm : samples) cu.set(sm.index + 1, static_cast<double>(sm.small_t0 + sm.len));
  small.tensors["cu_seqlens"] = std::move(cu);
  small.options["chunk_size"] = c.BT;
  small.allocate_outputs();
  const Clock::time_point ref_start = Clock::now();
  const HostProblem ref = reference_of(small);
  std::printf("    cpu-ref on the samples %.1f s\n", seconds_since(ref_start));

  // The sampled rows of every tensor, downloaded into the small problem's layout.
  auto download = [&](const BigTensor& t) {
    HostTensor host = small.get(t.name);
    const size_t unit_bytes = static_cast<size_t>(t.run()) * t.item();
    const auto* src = static_cast<const uint8_t*>(t.device.get());
    for (const Sample& sm : samples) {
      const int64_t from = t.per_chunk ? sm.chunk : sm.t0;
      const int64_t to = t.per_chunk ? sm.index : sm.small_t0;
      const int64_t units = t.per_chunk ? 1 : sm.len;
      check_cuda(cudaMemcpy(host.bytes.data() + to * unit_bytes, src + from * unit_bytes,
                            units * unit_bytes, cudaMemcpyDeviceToHost),
                 "sample D2H");
    }
    return host;
  };
  const double bar = kda::io::pass_bar(c.x);
  for (const BigTensor& t : tensors) {
    const HostTensor got = download(t);
    if (!t.output) {
      EXPECT_EQ(got.bytes, small.get(t.name).bytes) << "input " << t.name << " was modified";
      continue;
    }
    const HostTensor& want = ref.get(t.name);
    const int64_t run = t.run();
    for (const Sample& sm : samples) {
      double num = 0.0, den = 0.0;
      int64_t poisoned = 0, not_finite = 0;
      for (int64_t i = sm.small_t0 * run; i < (sm.small_t0 + sm.len) * run; ++i) {
        if (is_poison(got, i)) {
          ++poisoned;
          continue;
        }
        const double g = got.at(i), r = want.at(i);
        if (!std::isfinite(g)) {
          ++not_finite;
          continue;
        }
        num += (g - r) * (g - r);
        den += r * r;
      }
      const double err = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
      EXPECT_EQ(poisoned, 0) << t.name << ", chunk " << sm.chunk << ": " << poisoned
                             << " elements never written";
      EXPECT_EQ(not_finite, 0) << t.name << ", chunk " << sm.chunk;
      EXPECT_LE(err, bar) << t.name << ", chunk " << sm.chunk << " (tokens " << sm.t0 << ".."
                          << sm.t0 + sm.len - 1 << "): err_ratio " << err;
    }
  }
  cudaStreamDestroy(stream);
  std::printf("    total %.1f s\n", seconds_since(start));
}

// T = 174821 tokens (2731 full chunks of 64 and a tail of 37), HV = 48 value heads, H = 6.
// k256_v16: g, dq, dk, dg hold 2.15e9 float32 elements each (past 2^31, the boundary in chunk
// 2730, head 32), the general kernel. k128_v128: h, dh hold 2.15e9 bf16 elements each, g, dq, dk,
// dg 1.07e9 (past 2^32 bytes); K = V = 128 takes the tensor-core path under
// KDA_CUDA_KERNEL=auto. About 44 and 40 GB of device memory.
INSTANTIATE_TEST_SUITE_P(HugeShapes, Past2To31Elements,
                         ::testing::Values(HugeCase{"k256_v16_bf16_hf32", 174821, 6, 48, 256, 16,
                                                    64, DType::bf16, DType::f32},
                                           HugeCase{"k128_v128_bf16_hbf16", 174821, 6, 48, 128, 128,
                                                    64, DType::bf16, DType::bf16}),
                         huge_case_name);

// --- 3. NaN / Inf and extreme gates ----------------------------------------------------------

struct SpecialCase {
  std::string name;
  WyDqkgConfig config;
  bool int32_indices = false;
};

// Printed by its name (gtest would print a hex dump of the struct in every test listing and skip
// line).
void PrintTo(const SpecialCase& c, std::ostream* out) {
  *out << c.name;
}

std::string special_case_name(const ::testing::TestParamInfo<SpecialCase>& p) {
  return p.param.name;
}

// Fixed length bf16 with K = V = 64 (tensor-core path under auto; chunks [0,64) [64,128)
// [128,145)), and float32 varlen with device-resident int32 indices (the general kernel; chunks
// [0,5) [5,21) [21,22) [22,23) [23,39) [39,53)). GVA: H = 2, HV = 4.
std::vector<SpecialCase> special_cases() {
  std::vector<SpecialCase> cases;
  cases.push_back({"fixed_bf16", config_of(DType::bf16, DType::f32, 64, 2, 145, 2, 4, 64, 64)});
  cases.push_back(
      {"varlen_fp32",
       varlen_of(config_of(DType::f32, DType::f32, 16, 1, 0, 2, 4, 32, 16), {5, 17, 1, 30}, true),
       true});
  return cases;
}

// Where one input element may reach: the rows [t0, t1) of batch row b, value heads [hv0, hv1).
struct Block {
  int64_t b, t0, t1, hv0, hv1;
  bool contains(const Coords& c) const {
    return c.b == b && c.t >= t0 && c.t < t1 && c.hv >= hv0 && c.hv < hv1;
  }
};

struct Injection {
  std::string what;
  std::string input;
  int64_t element = 0;
  double value = 0.0;
  Block block{};
  int64_t t = -1, col = -1;  // token-indexed inputs: the token and the innermost index
};

// One element of a token-indexed input at (b, t, head, col).
Injection token_injection(const WyDqkgConfig& c, const char* input, int64_t b, int64_t t,
                          int64_t head, int64_t col, double value) {
  const std::string name(input);
  const bool query_head = name == "q" || name == "k";
  const int64_t group = c.HV / c.H;
  const int64_t heads = query_head ? c.H : c.HV;
  const int64_t inner = name == "beta"                ? 1
                        : (query_head || name == "g") ? c.K
                        : name == "A"                 ? c.BT
                                                      : c.V;
  const auto [t0, t1] = chunk_of(c, t);
  Injection inj;
  inj.what = name + "[" + std::to_string(b) + ", " + std::to_string(t) + ", " +
             std::to_string(head) + ", " + std::to_string(col) + "] = " + std::to_string(value);
  inj.input = name;
  inj.element = ((b * c.T + t) * heads + head) * inner + col;
  inj.value = value;
  inj.block = {b, t0, t1, query_head ? head * group : head,
               query_head ? (head + 1) * group : head + 1};
  inj.t = t;
  inj.col = col;
  return inj;
}

// One element (k, v) of h or dh for chunk `chunk` (per batch row when fixed length, global when
// varlen) of batch row b, whose tokens are [t0, t1).
Injection state_injection(const WyDqkgConfig& c, const char* input, int64_t b, int64_t chunk,
                          int64_t t0, int64_t t1, int64_t hv, int64_t k, int64_t v, double value) {
  int64_t NT = 0;
  if (c.seqlens.empty()) {
    NT = (c.T + c.BT - 1) / c.BT;
  } else {
    for (int64_t len : c.seqlens) NT += (len + c.BT - 1) / c.BT;
  }
  Injection inj;
  inj.what = std::string(input) + "[" + std::to_string(b) + ", " + std::to_string(chunk) + ", " +
             std::to_string(hv) + ", " + std::to_string(k) + ", " + std::to_string(v) +
             "] = " + std::to_string(value);
  inj.input = input;
  inj.element = (((b * NT + chunk) * c.HV + hv) * c.K + k) * c.V + v;
  inj.value = value;
  inj.block = {b, t0, t1, hv, hv + 1};
  return inj;
}

std::vector<Injection> injections(const SpecialCase& sc) {
  const WyDqkgConfig& c = sc.config;
  std::vector<Injection> out;
  if (c.seqlens.empty()) {
    out.push_back(token_injection(c, "q", 1, 70, 1, 3, kNaN));
    out.push_back(token_injection(c, "k", 0, 100, 0, 15, kInf));
    out.push_back(token_injection(c, "v", 1, 130, 3, 7, kNaN));
    out.push_back(token_injection(c, "v_new", 0, 64, 2, 0, kNaN));
    out.push_back(token_injection(c, "g", 1, 127, 1, 5, kNaN));  // a chunk's last row: gn
    out.push_back(token_injection(c, "g", 0, 3, 2, 9, -kInf));
    out.push_back(token_injection(c, "beta", 0, 9, 3, 0, kInf));
    out.push_back(token_injection(c, "A", 1, 140, 0, 2, kNaN));  // the tail chunk, column < L
    out.push_back(token_injection(c, "do", 0, 144, 2, 4, -kInf));
    out.push_back(token_injection(c, "dv", 1, 16, 1, 6, kInf));
    out.push_back(state_injection(c, "h", 1, 1, 64, 128, 2, 5, 1, kNaN));
    out.push_back(state_injection(c, "dh", 0, 2, 128, 145, 3, 60, 63, kInf));
  } else {
    out.push_back(token_injection(c, "q", 0, 22, 0, 1, kNaN));  // the one-token sequence
    out.push_back(token_injection(c, "k", 0, 52, 1, 10, kNaN));
    out.push_back(token_injection(c, "dv", 0, 30, 2, 3, kInf));
    out.push_back(token_injection(c, "g", 0, 45, 3, 0, kNaN));
    out.push_back(token_injection(c, "beta", 0, 21, 1, 0, kNaN));
    out.push_back(token_injection(c, "A", 0, 5, 0, 7, kInf));
    out.push_back(state_injection(c, "h", 0, 4, 23, 39, 2, 5, 1, kNaN));
    out.push_back(state_injection(c, "dh", 0, 1, 5, 21, 0, 31, 15, kNaN));
  }
  return out;
}

class GpuSpecialValues : public ::testing::TestWithParam<SpecialCase> {};

// Per injected element: the run succeeds; every output element outside the block is bitwise what
// the clean GPU run gave; the non-finite elements are exactly cpu-ref's (which propagates in
// float64 by the SPEC's formulas); the finite ones are within the bar; something in the block
// turned non-finite. For NaN in q, that is dg at its row, column and value heads only; for NaN in
// h, dq's column k on every row of its chunk.
TEST_P(GpuSpecialValues, StayInTheirChunkAndHeadsExactlyAsInCpuRef) {
  SKIP_WITHOUT_GPU();
  SpecialCase sc = GetParam();
  sc.config.seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(sc.config.seed));
  HostProblem hp = kda::io::make_random_problem(sc.config);
  if (sc.int32_indices) use_int32_indices(hp);
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  HostProblem clean;
  {
    DeviceProblem dev(hp, 0);
    clean = run_on(dev, nullptr);
  }
  ASSERT_EQ(count_poison(clean), 0);
  const double bar = kda::io::pass_bar(sc.config.x_dtype);
  const int64_t group = sc.config.HV / sc.config.H;
  for (const Injection& inj : injections(sc)) {
    SCOPED_TRACE(inj.what);
    HostProblem dirty = hp;
    dirty.get(inj.input).set(inj.element, inj.value);
    const HostProblem ref = reference_of(dirty);
    DeviceProblem dev(dirty, 0);
    dev.poison_outputs();
    const kda::Status s =
        kda::run(dev.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, nullptr, run_kernel());
    ASSERT_TRUE(s.ok()) << s.message;
    const cudaError_t synced = cudaDeviceSynchronize();
    ASSERT_EQ(synced, cudaSuccess) << cudaGetErrorString(synced);
    const HostProblem out = dev.download_outputs();
    bool reached = false;
    int64_t non_finite = 0;
    for (const std::string& name : kda::testing::wy_outputs()) {
      const HostTensor& got = out.get(name);
      const HostTensor& want = ref.get(name);
      const HostTensor& before = clean.get(name);
      int64_t leaks = 0, mismatches = 0;
      std::string first_leak, first_mismatch;
      auto where = [&](const Coords& at) {
        return std::string(name) + "[b=" + std::to_string(at.b) + ", t=" + std::to_string(at.t) +
               ", hv=" + std::to_string(at.hv) + ", " + std::to_string(at.col) + "]";
      };
      for (int64_t i = 0; i < got.numel(); ++i) {
        const Coords at = coords_of(got, i);
        const bool inside = inj.block.contains(at);
        const bool finite = std::isfinite(got.at(i));
        if (!inside && !bitwise_equal(got, before, i) && leaks++ == 0) first_leak = where(at);
        if (finite != std::isfinite(want.at(i)) && mismatches++ == 0) {
          first_mismatch = where(at) + " = " + std::to_string(got.at(i)) + ", cpu-ref " +
                           std::to_string(want.at(i));
        }
        if (finite) continue;
        ++non_finite;
        reached = reached || inside;
        if (inj.input == "q") {
          EXPECT_TRUE(std::string(name) == "out.dg" && inside && at.t == inj.t && at.col == inj.col)
              << where(at) << " is not finite: NaN in q must reach only dg at its row and column";
        }
      }
      EXPECT_EQ(leaks, 0) << leaks << " elements changed outside the block, first " << first_leak;
      EXPECT_EQ(mismatches, 0) << mismatches
                               << " elements finite here and not in cpu-ref or the reverse, first "
                               << first_mismatch;
      const FiniteCompare cmp = compare_where_finite(got, want);
      EXPECT_LE(cmp.err, bar) << name << " err_ratio over the finite elements";
    }
    EXPECT_TRUE(reached) << "the special value reached no output in its block";
    if (inj.input == "q") {
      EXPECT_EQ(non_finite, group) << "NaN in q must reach exactly dg of its row and column, once "
                                      "per value head of its group";
    }
    if (inj.input == "h") {
      const HostTensor& dq = out.get("out.dq");
      const int64_t k = (inj.element / sc.config.V) % sc.config.K;
      for (int64_t t = inj.block.t0; t < inj.block.t1; ++t) {
        const int64_t i =
            ((inj.block.b * sc.config.T + t) * sc.config.HV + inj.block.hv0) * sc.config.K + k;
        EXPECT_TRUE(std::isnan(dq.at(i))) << "dq row " << t << " column " << k;
      }
    }
  }
}

// Gates in log2 space, per element of g (token t of batch row b, value head hv, column k):
// - monotone: within each chunk G falls linearly from about -s/L to -s, s in [30, 60] per column:
//   the most extreme realistic decay (E = exp2(G) down to 2^-60, exp2(gn - G) <= 1);
// - mixed: 0 or -60 at random, as test_reliability.cpp does on the CPU (exp2(gn - G) up to 2^60);
// - beyond: -200 on every row but each chunk's last (0): exp2(gn - G) = 2^200 is past float32, so
//   dk and dg are not finite in cpu-ref either, but dq, dv_out, db and dA are, and must be here.
enum class Gates { monotone, mixed, beyond };

void apply_gates(HostProblem& hp, const WyDqkgConfig& c, Gates pattern, uint64_t seed) {
  HostTensor& g = hp.get("g");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> scale(static_cast<size_t>(c.HV * c.K));
  for (double& s : scale) s = 30.0 + 30.0 * uniform(rng);
  const int64_t HV = g.shape[2], K = g.shape[3], T = g.shape[1];
  for (int64_t i = 0; i < g.numel(); ++i) {
    const int64_t k = i % K, hv = (i / K) % HV, t = (i / (K * HV)) % T;
    const auto [t0, t1] = chunk_of(c, t);
    double value = 0.0;
    switch (pattern) {
      case Gates::monotone:
        value = -scale[static_cast<size_t>(hv * K + k)] * static_cast<double>(t - t0 + 1) /
                static_cast<double>(t1 - t0);
        break;
      case Gates::mixed:
        value = rng() % 2 ? 0.0 : -60.0;
        break;
      case Gates::beyond:
        value = t == t1 - 1 ? 0.0 : -200.0;
        break;
    }
    g.set(i, value);
  }
}

class GpuExtremeGates : public ::testing::TestWithParam<SpecialCase> {};

TEST_P(GpuExtremeGates, FiniteWhereverCpuRefIsAndWithinTheBar) {
  SKIP_WITHOUT_GPU();
  SpecialCase sc = GetParam();
  sc.config.seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(sc.config.seed));
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  const double bar = kda::io::pass_bar(sc.config.x_dtype);
  for (Gates pattern : {Gates::monotone, Gates::mixed, Gates::beyond}) {
    const char* pattern_name = pattern == Gates::monotone ? "monotone to -60"
                               : pattern == Gates::mixed  ? "mixed 0 / -60"
                                                          : "-200 but each chunk's last row";
    SCOPED_TRACE(pattern_name);
    HostProblem hp = kda::io::make_random_problem(sc.config);
    if (sc.int32_indices) use_int32_indices(hp);
    apply_gates(hp, sc.config, pattern, sc.config.seed + 1);
    const HostProblem ref = reference_of(hp);
    DeviceProblem dev(hp, 0);
    dev.poison_outputs();
    const kda::Status s =
        kda::run(dev.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, nullptr, run_kernel());
    ASSERT_TRUE(s.ok()) << s.message;
    const cudaError_t synced = cudaDeviceSynchronize();
    ASSERT_EQ(synced, cudaSuccess) << cudaGetErrorString(synced);
    const HostProblem out = dev.download_outputs();
    for (const std::string& name : kda::testing::wy_outputs()) {
      const HostTensor& got = out.get(name);
      const HostTensor& want = ref.get(name);
      const bool math_finite = pattern != Gates::beyond ||
                               (std::string(name) != "out.dk" && std::string(name) != "out.dg");
      if (math_finite) {
        int64_t ref_not_finite = 0;
        for (int64_t i = 0; i < want.numel(); ++i) {
          ref_not_finite += std::isfinite(want.at(i)) ? 0 : 1;
        }
        EXPECT_EQ(ref_not_finite, 0) << "cpu-ref " << name << " (the premise of this case)";
      }
      const FiniteCompare cmp = compare_where_finite(got, want);
      EXPECT_EQ(cmp.not_finite, 0) << name << "[" << cmp.first_bad
                                   << "] is not finite (or unwritten) where cpu-ref is finite";
      EXPECT_LE(cmp.err, bar) << name << " err_ratio over cpu-ref's finite elements";
      std::printf("    %-28s %-10s err_ratio %.3e\n", pattern_name, name.c_str(), cmp.err);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuSpecialValues, ::testing::ValuesIn(special_cases()),
                         special_case_name);

std::vector<SpecialCase> gate_cases() {
  std::vector<SpecialCase> cases = special_cases();
  cases.push_back({"fixed_fp32", config_of(DType::f32, DType::f32, 64, 2, 145, 2, 4, 64, 64)});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuExtremeGates, ::testing::ValuesIn(gate_cases()),
                         special_case_name);

// --- 4. garbage device-resident index tensors ------------------------------------------------
//
// Sequences 5, 40, 1, 33 with BT = 16: chunks 0 [0,5) | 1 [5,21) 2 [21,37) 3 [37,45) | 4 [45,46)
// | 5 [46,62) 6 [62,78) 7 [78,79); T = 79, NT = 8, cu_seqlens [0, 5, 45, 46, 79]. The rule
// (docs/design.md, wy_dqkg_unit.cuh): a unit whose sequence id is outside [0, N), or whose bos,
// eos break 0 <= bos <= eos <= T, or whose chunk id is outside [0, ceil((eos - bos) / BT)), is
// skipped and its rows keep the caller's bytes (the poison here). Without chunk_indices the unit
// count is h.shape[1] and a warp scan over the lengths clamped to [0, T] maps units to chunks.
// Where that rule fixes the result, the test checks it; elsewhere only that nothing faulted.

struct GarbageCase {
  std::string name;
  DType x;
  bool int32;
};

// Printed by its name (gtest would print a hex dump of the struct in every test listing and skip
// line).
void PrintTo(const GarbageCase& c, std::ostream* out) {
  *out << c.name;
}

std::string garbage_case_name(const ::testing::TestParamInfo<GarbageCase>& p) {
  return p.param.name;
}

struct Rows {
  int64_t t0, t1;
  bool contains(int64_t t) const { return t >= t0 && t < t1; }
};

// Writes index element i exactly (int64 extremes do not survive a trip through double).
void set_index(HostTensor& t, int64_t i, int64_t value) {
  if (t.dtype == DType::i32) {
    const auto v = static_cast<int32_t>(value);
    std::memcpy(t.bytes.data() + i * 4, &v, 4);
  } else {
    std::memcpy(t.bytes.data() + i * 8, &value, 8);
  }
}

int64_t index_min(const HostTensor& t) {
  return t.dtype == DType::i32 ? std::numeric_limits<int32_t>::min()
                               : std::numeric_limits<int64_t>::min();
}
int64_t index_max(const HostTensor& t) {
  return t.dtype == DType::i32 ? std::numeric_limits<int32_t>::max()
                               : std::numeric_limits<int64_t>::max();
}

// h and dh with `chunks` chunks: the first ones copied, any extra drawn at random.
void resize_states(HostProblem& hp, int64_t chunks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const char* name : {"h", "dh"}) {
    const HostTensor& old = hp.get(name);
    std::vector<int64_t> shape = old.shape;
    shape[1] = chunks;
    HostTensor fresh(old.dtype, shape);
    const size_t per_chunk = old.bytes.size() / static_cast<size_t>(old.shape[1]);
    const int64_t kept = std::min(chunks, old.shape[1]);
    std::memcpy(fresh.bytes.data(), old.bytes.data(), per_chunk * static_cast<size_t>(kept));
    const int64_t per_chunk_elements = fresh.numel() / chunks;
    for (int64_t i = kept * per_chunk_elements; i < fresh.numel(); ++i) fresh.set(i, normal(rng));
    hp.tensors[name] = std::move(fresh);
  }
}

// Runs `hp` with its index tensors uploaded as they are; the call and the device must survive.
HostProblem run_garbage(const HostProblem& hp) {
  DeviceProblem dev(hp, 0);
  dev.poison_outputs();
  const kda::Status s =
      kda::run(dev.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, nullptr, run_kernel());
  EXPECT_TRUE(s.ok()) << s.message;
  const cudaError_t synced = cudaDeviceSynchronize();
  EXPECT_EQ(synced, cudaSuccess) << "the run faulted: " << cudaGetErrorString(synced);
  const cudaError_t last = cudaGetLastError();
  EXPECT_EQ(last, cudaSuccess) << cudaGetErrorString(last);
  if (synced != cudaSuccess) throw std::runtime_error("device unusable after a faulting run");
  return dev.download_outputs();
}

// The whole of `out` within the pass bar of `ref` (cpu-ref): for runs whose indices are consistent.
void expect_close_to_reference(const HostProblem& out, const HostProblem& ref) {
  const double bar = kda::io::pass_bar(ref.get("q").dtype);
  for (const std::string& name : kda::testing::wy_outputs()) {
    const double err = kda::io::err_ratio(out.get(name), ref.get(name));
    EXPECT_LE(err, bar) << name << " err_ratio vs cpu-ref";
  }
}

// Rows in `poisoned` still hold the poison; rows in neither list are written and equal, bit for
// bit, to `clean`: the same kernel's run on consistent indices (checked against cpu-ref with
// expect_close_to_reference). A unit that a garbage index does not touch computes exactly what it
// computes in the clean run. (An err_ratio against cpu-ref over the few rows left here was a
// noisy test: 10 db values once gave 9.1e-3 against the bf16 bar of 8e-3.)
void expect_rows(const HostProblem& out, const HostProblem& clean,
                 const std::vector<Rows>& poisoned, const std::vector<Rows>& unchecked = {}) {
  auto in = [](const std::vector<Rows>& list, int64_t t) {
    return std::any_of(list.begin(), list.end(), [t](const Rows& r) { return r.contains(t); });
  };
  for (const std::string& name : kda::testing::wy_outputs()) {
    const HostTensor& got = out.get(name);
    const HostTensor& want = clean.get(name);
    int64_t written = 0, unwritten = 0, differ = 0;
    int64_t first_written = -1, first_unwritten = -1, first_differ = -1;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const int64_t t = coords_of(got, i).t;
      const bool poison = is_poison(got, i);
      if (in(poisoned, t)) {
        if (!poison && written++ == 0) first_written = t;
        continue;
      }
      if (in(unchecked, t)) continue;
      if (poison) {
        if (unwritten++ == 0) first_unwritten = t;
        continue;
      }
      if (!bitwise_equal(got, want, i) && differ++ == 0) first_differ = t;
    }
    EXPECT_EQ(written, 0) << name << ": a skipped unit wrote token row " << first_written;
    EXPECT_EQ(unwritten, 0) << name << ": token row " << first_unwritten << " was not written";
    EXPECT_EQ(differ, 0) << name << ": token row " << first_differ
                         << " differs from the run on consistent indices";
  }
}

class DeviceIndexGarbage : public ::testing::TestWithParam<GarbageCase> {
 protected:
  // The clean problem (with chunk_indices) and its cpu-ref outputs.
  void SetUp() override {
    if (kda::testing::cuda_device_count() == 0) return;
    WyDqkgConfig c = varlen_of(config_of(GetParam().x, DType::f32, 16, 1, 0, 1, 2, 64, 64),
                               {5, 40, 1, 33}, true);
    c.seed = fresh_seed();
    seed_ = c.seed;
    hp_ = kda::io::make_random_problem(c);
    if (GetParam().int32) use_int32_indices(hp_);
    ref_ = reference_of(hp_);
    check_cuda(cudaSetDevice(0), "cudaSetDevice");
  }
  HostProblem without_chunk_indices() const {
    HostProblem hp = hp_;
    hp.tensors.erase("chunk_indices");
    return hp;
  }
  // The clean problem's GPU outputs, checked against cpu-ref: what untouched units must equal.
  HostProblem clean_run() const {
    HostProblem out = run_garbage(hp_);
    SCOPED_TRACE("consistent indices");
    expect_close_to_reference(out, ref_);
    return out;
  }
  uint64_t seed_ = 0;
  HostProblem hp_;
  HostProblem ref_;
};

TEST_P(DeviceIndexGarbage, ChunkIndicesRowsOutOfRangeAreSkipped) {
  SKIP_WITHOUT_GPU();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  HostProblem hp = hp_;
  HostTensor& ci = hp.get("chunk_indices");
  const int64_t lo = index_min(ci), hi = index_max(ci);
  const std::pair<int64_t, std::pair<int64_t, int64_t>> bad[] = {
      {1, {-1, 0}},   // sequence id < 0
      {3, {4, 0}},    // sequence id == N
      {4, {2, 1}},    // chunk id past its sequence (sequence 2 has one chunk)
      {6, {3, -1}},   // chunk id < 0
      {7, {hi, lo}},  // extremes of the dtype
  };
  for (const auto& [row, value] : bad) {
    set_index(ci, 2 * row, value.first);
    set_index(ci, 2 * row + 1, value.second);
  }
  const HostProblem clean = clean_run();
  expect_rows(run_garbage(hp), clean, {{5, 21}, {37, 45}, {45, 46}, {62, 78}, {78, 79}});

  // More rows than chunks: rows 8 and 9 (sequence 5, chunk 0 and sequence 0, chunk 1) are
  // invalid; h carries 10 chunks.
  HostProblem longer = hp_;
  HostTensor& old = longer.get("chunk_indices");
  HostTensor ten(old.dtype, {10, 2});
  std::memcpy(ten.bytes.data(), old.bytes.data(), old.bytes.size());
  set_index(ten, 16, 5);
  set_index(ten, 17, 0);
  set_index(ten, 18, 0);
  set_index(ten, 19, 1);
  longer.tensors["chunk_indices"] = std::move(ten);
  resize_states(longer, 10, seed_ + 1);
  expect_rows(run_garbage(longer), clean, {});
}

TEST_P(DeviceIndexGarbage, CuSeqlensOutOfRangeWithChunkIndices) {
  SKIP_WITHOUT_GPU();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  struct Variant {
    const char* what;
    std::vector<std::pair<int64_t, int64_t>> entries;  // (index, value) to overwrite
    std::vector<Rows> poisoned, unchecked;
  };
  const HostTensor& cu0 = hp_.get("cu_seqlens");
  const int64_t lo = index_min(cu0), hi = index_max(cu0);
  const std::vector<Variant> variants = {
      {"interior entry past T", {{2, 1000}}, {{5, 46}}, {}},
      {"negative first entry", {{0, -7}}, {{0, 5}}, {}},
      {"last entry past T", {{4, 80}}, {{46, 79}}, {}},
      // Sequence 3 becomes [46, 60): its chunk 0 is recomputed with L = 14, its chunks 1, 2 fail.
      {"last entry short of T", {{4, 60}}, {{60, 79}}, {{46, 60}}},
      // [0, 45, 5, 46, 79]: sequence 1 fails (bos > eos); sequences 0 and 2 now cover [0, 45) and
      // [5, 46), so their single chunk ids write other rows.
      {"decreasing", {{1, 45}, {2, 5}}, {{21, 46}}, {{0, 21}}},
      {"extremes", {{0, lo}, {1, hi}, {2, lo}, {3, hi}, {4, lo}}, {{0, 79}}, {}},
  };
  const HostProblem clean = clean_run();
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    HostProblem hp = hp_;
    for (const auto& [i, value] : v.entries) set_index(hp.get("cu_seqlens"), i, value);
    expect_rows(run_garbage(hp), clean, v.poisoned, v.unchecked);
  }
}

TEST_P(DeviceIndexGarbage, CuSeqlensOutOfRangeWithoutChunkIndices) {
  SKIP_WITHOUT_GPU();
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const HostProblem base = without_chunk_indices();
  // The scan over consistent cu_seqlens maps units as chunk_indices do: the same bits.
  const HostProblem clean = run_garbage(base);
  {
    SCOPED_TRACE("consistent (the scan alone)");
    expect_close_to_reference(clean, ref_);
    expect_rows(clean, clean_run(), {});
  }
  struct Variant {
    const char* what;
    std::vector<std::pair<int64_t, int64_t>> entries;
    std::vector<Rows> poisoned, unchecked;  // empty both: only "no fault" is checked
    bool checked;
  };
  const HostTensor& cu0 = base.get("cu_seqlens");
  const int64_t lo = index_min(cu0), hi = index_max(cu0);
  const std::vector<Variant> variants = {
      // Clamped lengths 5, 79, 0, 33 -> chunk counts 1, 5, 0, 3: units 1-5 map to sequence 1
      // (eos > T: skipped), units 6, 7 to sequence 3's chunks 0, 1 (computed, with h of chunks 6
      // and 7), and nothing to sequence 3's chunk 2 (row 78).
      {"interior entry past T", {{2, 1000}}, {{5, 46}, {78, 79}}, {{46, 78}}, true},
      // Lengths 12, 40, 1, 33: the same chunk counts, so the same mapping; sequence 0 fails.
      {"negative first entry", {{0, -7}}, {{0, 5}}, {}, true},
      {"last entry past T", {{4, 80}}, {{46, 79}}, {}, true},
      {"decreasing", {{1, 45}, {2, 5}}, {}, {}, false},
      // No sequence can pass 0 <= bos <= eos <= T, whatever the scan made of the lengths.
      {"extremes", {{0, lo}, {1, hi}, {2, lo}, {3, hi}, {4, lo}}, {{0, 79}}, {}, true},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    HostProblem hp = base;
    for (const auto& [i, value] : v.entries) set_index(hp.get("cu_seqlens"), i, value);
    const HostProblem out = run_garbage(hp);
    if (v.checked) expect_rows(out, clean, v.poisoned, v.unchecked);
  }
  {
    // h holds more chunks than cu_seqlens describes: units 8-11 find no chunk and are skipped.
    SCOPED_TRACE("h with 12 chunks");
    HostProblem hp = base;
    resize_states(hp, 12, seed_ + 2);
    expect_rows(run_garbage(hp), clean, {});
  }
  {
    // Fewer: sequence 3's chunks (units 5-7) are not computed.
    SCOPED_TRACE("h with 5 chunks");
    HostProblem hp = base;
    resize_states(hp, 5, seed_ + 3);
    expect_rows(run_garbage(hp), clean, {{46, 79}});
  }
  {
    // 70 sequences of random garbage (several 32-wide scan steps), extremes included.
    SCOPED_TRACE("70 random entries");
    HostProblem hp = base;
    HostTensor cu(cu0.dtype, {71});
    std::mt19937_64 rng(seed_ + 4);
    for (int64_t i = 0; i < 71; ++i) {
      const uint64_t r = rng() % 10;
      set_index(cu, i, r == 0 ? lo : r == 1 ? hi : static_cast<int64_t>(rng() % 301) - 100);
    }
    hp.tensors["cu_seqlens"] = std::move(cu);
    run_garbage(hp);
  }
}

INSTANTIATE_TEST_SUITE_P(Indices, DeviceIndexGarbage,
                         ::testing::Values(GarbageCase{"bf16_i64", DType::bf16, false},
                                           GarbageCase{"bf16_i32", DType::bf16, true},
                                           GarbageCase{"fp32_i64", DType::f32, false},
                                           GarbageCase{"fp32_i32", DType::f32, true}),
                         garbage_case_name);

// --- 5. several GPUs -------------------------------------------------------------------------
// A parameterized suite (the parameter: the second device, 1) defined last in this file, so that
// it runs after every other test here (gtest runs plain TESTs first, then parameterized suites
// in the order they are defined): a library that launched on the wrong device would leave a
// sticky fault behind on device 0.

class MultiGpu : public ::testing::TestWithParam<int> {};

std::string device_name_of(int device) {
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return std::string(prop.name) + " sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
}

bool all_poison(const HostProblem& out) {
  for (const std::string& name : kda::testing::wy_outputs()) {
    const HostTensor& t = out.get(name);
    if (!std::all_of(t.bytes.begin(), t.bytes.end(), [](uint8_t b) { return b == 0xff; })) {
      return false;
    }
  }
  return true;
}

// run_cuda makes q's device current (cudaGetDevice / cudaSetDevice), sets up the kernel's
// shared-memory opt-in for that device, launches on the caller's stream and restores the
// caller's device. With device 0 current and the tensors on device 1: the results match cpu-ref,
// device 0 is current afterwards, device 0 has no error (a kernel of ours run there on device 1's
// memory, without peer access, would fault), its free memory is unchanged and a poisoned copy of
// the problem there stays poisoned; on the legacy default stream and on a stream of device 1.
// Then the reverse (tensors on 0, device 1 current), bitwise equal to device 1's results on two
// GPUs of one model. The first config's kernel (f16, h f16, BT = 64: 100 KB of shared memory,
// past the 48 KB default) is used by no other test here, so it is first set up on device 1 and
// must be set up again for device 0. The second takes the tensor-core path under auto.
TEST_P(MultiGpu, TensorsOnDevice1RunThereAndDevice0IsLeftAlone) {
  SKIP_WITHOUT_TWO_GPUS();
  const int dev1 = GetParam();
  const bool same_model = device_name_of(0) == device_name_of(dev1);
  std::vector<WyDqkgConfig> configs = {
      config_of(DType::f16, DType::f16, 64, 2, 150, 2, 4, 48, 40),
      config_of(DType::bf16, DType::bf16, 32, 1, 300, 2, 4, 128, 128),
  };
  for (WyDqkgConfig& c : configs) {
    c.seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(c.seed) + ", K " + std::to_string(c.K));
    const HostProblem hp = kda::io::make_random_problem(c);
    const HostProblem ref = reference_of(hp);
    auto on1 = std::make_unique<DeviceProblem>(hp, dev1);  // leaves device 1 current
    on1->poison_outputs();
    cudaStream_t s1 = make_stream();                    // a stream of device 1
    auto on0 = std::make_unique<DeviceProblem>(hp, 0);  // leaves device 0 current
    on0->poison_outputs();
    size_t free_before = 0, free_after = 0, total = 0;
    check_cuda(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
    HostProblem out1;
    for (cudaStream_t stream : {static_cast<cudaStream_t>(nullptr), s1}) {
      SCOPED_TRACE(stream == nullptr ? "legacy default stream" : "a stream of device 1");
      check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
      const kda::Status s =
          kda::run(on1->as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, stream, run_kernel());
      ASSERT_TRUE(s.ok()) << s.message;
      EXPECT_EQ(current_device(), 0) << "the caller's current device was changed";
      const cudaError_t sync0 = cudaDeviceSynchronize();
      ASSERT_EQ(sync0, cudaSuccess) << "device 0: " << cudaGetErrorString(sync0);
      const cudaError_t last0 = cudaGetLastError();
      EXPECT_EQ(last0, cudaSuccess) << cudaGetErrorString(last0);
      EXPECT_TRUE(all_poison(on0->download_outputs())) << "device 0's copy was written";
      {
        CurrentDevice on_device_1(dev1);
        const cudaError_t sync1 = cudaDeviceSynchronize();
        ASSERT_EQ(sync1, cudaSuccess) << "device 1: " << cudaGetErrorString(sync1);
        out1 = on1->download_outputs();
        on1->poison_outputs();
      }
      expect_matches_reference(out1, ref, "device 1");
    }
    check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
    check_cuda(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
    EXPECT_EQ(free_after, free_before) << "device 0's free memory changed during runs on device 1";

    // The reverse: tensors on device 0 while device 1 is current.
    check_cuda(cudaSetDevice(dev1), "cudaSetDevice(dev1)");
    const kda::Status s =
        kda::run(on0->as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, nullptr, run_kernel());
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(current_device(), dev1) << "the caller's current device was changed";
    check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
    const cudaError_t sync0 = cudaDeviceSynchronize();
    ASSERT_EQ(sync0, cudaSuccess) << cudaGetErrorString(sync0);
    const HostProblem out0 = on0->download_outputs();
    expect_matches_reference(out0, ref, "device 0");
    if (same_model) {
      EXPECT_EQ(first_difference(out0, out1), "") << "devices 0 and 1 (one model) differ";
    }

    check_cuda(cudaSetDevice(dev1), "cudaSetDevice(dev1)");
    cudaStreamDestroy(s1);
    on1.reset();
    check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
    on0.reset();
  }
}

// A stream of another device than the tensors' one (tensors on device 1, a stream of device 0).
// CUDA does not refuse such a launch: the kernel would run on device 0 and fault on device 1's
// memory (seen on the H200 pair, 2026-11-30: "an illegal memory access"). So the backend refuses
// it up front as invalid_argument naming the stream, writes nothing, restores the caller's
// device, leaves no error behind for the caller's next check, and both devices keep working.
TEST_P(MultiGpu, AStreamOfAnotherDeviceIsRefusedAndTheCallersDeviceRestored) {
  SKIP_WITHOUT_TWO_GPUS();
  const int dev1 = GetParam();
  WyDqkgConfig c = config_of(DType::bf16, DType::f32, 16, 1, 100, 2, 2, 64, 64);
  c.seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(c.seed));
  const HostProblem hp = kda::io::make_random_problem(c);
  const HostProblem ref = reference_of(hp);
  auto on1 = std::make_unique<DeviceProblem>(hp, dev1);
  on1->poison_outputs();
  check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
  cudaStream_t s0 = make_stream();  // a stream of device 0
  const kda::Status refused =
      kda::run(on1->as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, s0, run_kernel());
  EXPECT_EQ(refused.code, StatusCode::invalid_argument) << refused.message;
  EXPECT_NE(refused.message.find("stream"), std::string::npos) << refused.message;
  std::printf("    status: %s\n", refused.message.c_str());
  EXPECT_EQ(current_device(), 0) << "the caller's device was not restored after a refusal";
  const cudaError_t last = cudaGetLastError();
  EXPECT_EQ(last, cudaSuccess) << cudaGetErrorString(last);
  const cudaError_t sync0 = cudaDeviceSynchronize();
  ASSERT_EQ(sync0, cudaSuccess) << "device 0: " << cudaGetErrorString(sync0);
  cudaStreamDestroy(s0);
  {
    CurrentDevice on_device_1(dev1);
    EXPECT_TRUE(all_poison(on1->download_outputs())) << "a refused call wrote outputs";
  }
  check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");

  const kda::Status s =
      kda::run(on1->as<kda::ChunkBwdWyDqkgProblem>(), Backend::cuda, nullptr, run_kernel());
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(current_device(), 0);
  check_cuda(cudaSetDevice(dev1), "cudaSetDevice(dev1)");
  const cudaError_t sync1 = cudaDeviceSynchronize();
  ASSERT_EQ(sync1, cudaSuccess) << "device 1: " << cudaGetErrorString(sync1);
  expect_matches_reference(on1->download_outputs(), ref, "device 1 after a failed launch");
  on1.reset();
  check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
}

INSTANTIATE_TEST_SUITE_P(TwoGpus, MultiGpu, ::testing::Values(1),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "tensors_on_cuda" + std::to_string(p.param);
                         });

}  // namespace
