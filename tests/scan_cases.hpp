#pragma once
// The GPU tests' problems for the two state scans (chunk_bwd_dhu, chunk_fwd_h): one list of
// cases over either operator's random-problem config (DhuConfig, FwdHConfig), so that both
// kernels of both directions see the same options: the tensor-core kernel's shape with every
// option (V-first states, fp16, the per-head gate, no incoming state, GVA with K = 64 and an odd
// V, varlen with int32 indices, K = 96, a chain of 1024 chunks, 200 short sequences), then the
// general kernel's (float32, BT 16 and 32, odd K and V,
// K = 256).

#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_op_check.hpp"
#include "io/host_problem.hpp"
#include "kda/tensor.hpp"
#include "test_support.hpp"

namespace kda::testing {

template <typename Config>
struct ScanCase {
  std::string name;
  Config config;
  bool int32_indices = false;
  bool tensor_cores = false;  // the tensor-core kernel takes it (run with auto and sm80_mma too)
};

template <typename Config>
void PrintTo(const ScanCase<Config>& c, std::ostream* out) {
  *out << c.name;
}

template <typename Config>
Config scan_base(DType x, int64_t K, int64_t V, int64_t BT) {
  Config c;
  c.B = 2;
  c.T = 150;
  c.H = 2;
  c.K = K;
  c.V = V;
  c.BT = BT;
  c.x_dtype = x;
  return c;
}

// The tensor-core kernel's shape: 16-bit X, BT = 64, K <= 128 and K, V multiples of 8.
template <typename Config>
Config scan_mma_base(DType x = DType::bf16) {
  Config c = scan_base<Config>(x, 128, 128, 64);
  c.B = 1;
  c.T = 300;
  return c;
}

// `without_state` drops the scan's incoming state (dht and h0, or initial_state).
template <typename Config>
std::vector<ScanCase<Config>> scan_full_cases(const std::function<void(Config&)>& without_state) {
  using C = ScanCase<Config>;
  std::vector<C> cases;
  {
    C c{"mma_kimi_bf16_vfirst", scan_mma_base<Config>()};
    c.config.state_v_first = true;
    cases.push_back(c);
  }
  {
    C c{"mma_fp16_b2_kfirst", scan_mma_base<Config>(DType::f16)};
    c.config.B = 2;
    c.config.T = 256;
    cases.push_back(c);
  }
  {
    C c{"mma_bf16_gdn_gate_g_no_gk", scan_mma_base<Config>()};
    c.config.use_g = true;
    c.config.use_gk = false;
    cases.push_back(c);
  }
  {
    C c{"mma_bf16_both_gates_no_state", scan_mma_base<Config>()};
    c.config.use_g = true;
    without_state(c.config);
    cases.push_back(c);
  }
  {
    C c{"mma_bf16_k64_v40_gva", scan_base<Config>(DType::bf16, 64, 40, 64)};
    c.config.HV = 4;
    cases.push_back(c);
  }
  {
    C c{"mma_bf16_varlen_chunk_indices_i32", scan_mma_base<Config>()};
    c.config.seqlens = {1, 70, 64, 17, 130, 2};
    c.config.T = 284;
    c.config.pass_chunk_indices = true;
    c.int32_indices = true;
    cases.push_back(c);
  }
  {
    // K = 96: the second 64-column box of the K-wide tiles lies partly past K (zero-filled).
    C c{"mma_fp16_k96_v64", scan_base<Config>(DType::f16, 96, 64, 64)};
    c.config.B = 1;
    c.config.T = 200;
    cases.push_back(c);
  }
  {
    // A long chain: 1024 steps of one sequence per head (B·H = 8), small K and V so that the
    // float64 reference stays a few seconds.
    C c{"mma_bf16_long_t65536_h8_k32_v32_vfirst", scan_base<Config>(DType::bf16, 32, 32, 64)};
    c.config.B = 1;
    c.config.T = 65536;
    c.config.H = 8;
    c.config.state_v_first = true;
    cases.push_back(c);
  }
  {
    // Many short sequences (1 to 61 tokens), most of them a single partial chunk.
    C c{"mma_bf16_many_short_seqs", scan_mma_base<Config>()};
    c.config.H = 2;
    c.config.seqlens.clear();
    int64_t total = 0;
    for (int i = 0; i < 200; ++i) {
      c.config.seqlens.push_back((i * 37) % 61 + 1);
      total += c.config.seqlens.back();
    }
    c.config.T = total;
    c.config.pass_chunk_indices = true;
    cases.push_back(c);
  }
  for (C& c : cases) c.tensor_cores = true;
  {
    C c{"simt_fp32_bt32_k40_v24_vfirst", scan_base<Config>(DType::f32, 40, 24, 32)};
    c.config.state_v_first = true;
    cases.push_back(c);
  }
  {
    C c{"simt_fp32_k128_gates_both", scan_base<Config>(DType::f32, 128, 128, 64)};
    c.config.B = 1;
    c.config.use_g = true;
    cases.push_back(c);
  }
  {
    C c{"simt_fp16_bt16_varlen_k20_v36", scan_base<Config>(DType::f16, 20, 36, 16)};
    c.config.B = 1;
    c.config.seqlens = {1, 17, 33, 1, 20};
    c.config.T = 72;
    c.config.pass_chunk_indices = true;
    cases.push_back(c);
  }
  {
    C c{"simt_bf16_k256_gva_h1_hv3", scan_base<Config>(DType::bf16, 256, 48, 64)};
    c.config.H = 1;
    c.config.HV = 3;
    c.config.T = 100;
    cases.push_back(c);
  }
  return cases;
}

// The small set compute-sanitizer runs: one problem per kernel.
template <typename Config>
std::vector<ScanCase<Config>> scan_subset_cases() {
  using C = ScanCase<Config>;
  std::vector<C> cases;
  {
    C c{"mma_bf16_varlen_vfirst", scan_mma_base<Config>()};
    c.config.seqlens = {1, 90, 5};
    c.config.T = 96;
    c.config.pass_chunk_indices = true;
    c.config.state_v_first = true;
    c.config.use_g = true;
    c.tensor_cores = true;
    cases.push_back(c);
  }
  {
    C c{"simt_fp32_bt32_varlen", scan_base<Config>(DType::f32, 40, 24, 32)};
    c.config.B = 1;
    c.config.seqlens = {1, 40, 3};
    c.config.T = 44;
    c.config.pass_chunk_indices = true;
    cases.push_back(c);
  }
  return cases;
}

// One case: a fresh random problem (seed printed), every kernel that takes it against cpu-ref.
template <typename Config>
void check_scan_case(const ScanCase<Config>& c) {
  Config config = c.config;
  config.seed = fresh_seed();
  io::HostProblem hp = io::make_random_problem(config);
  if (c.int32_indices) use_int32_indices(hp);
  std::printf("  %s seed %llu\n", c.name.c_str(), static_cast<unsigned long long>(config.seed));
  check_kernels_against_cpu_ref(
      hp, config.seed, io::op_of(hp).pass_bar(config.x_dtype),
      c.tensor_cores ? std::vector<Kernel>{Kernel::auto_, Kernel::sm80_mma, Kernel::simt}
                     : std::vector<Kernel>{Kernel::simt});
}

}  // namespace kda::testing
