// Writes the seed corpus of fuzz_safetensors: a few small valid files that reach every part of
// the reader and of problem_from_safetensors. The files are committed under
// fuzz/corpus/fuzz_safetensors/; rerun this only when the file layout changes:
//   build-fuzz/fuzz/fuzz_make_seeds fuzz/corpus/fuzz_safetensors

#include <cstdio>
#include <string>

#include "io/host_problem.hpp"
#include "io/safetensors.hpp"
#include "kda/kda.hpp"

namespace {

using kda::DType;
using kda::io::HostTensor;
using kda::io::SafetensorsFile;
using kda::io::WyDqkgConfig;

// A problem with its cpu-ref outputs as out.<name>, like the golden files but tiny.
SafetensorsFile solved(const WyDqkgConfig& c) {
  kda::io::HostProblem p = kda::io::make_random_problem(c);
  const kda::Status s = kda::run(p.as<kda::ChunkBwdWyDqkgProblem>(), kda::Backend::cpu_ref);
  if (!s.ok()) std::fprintf(stderr, "make_seeds: %s\n", s.message.c_str());
  return kda::io::problem_to_safetensors(p);
}

HostTensor ramp(DType dtype, std::vector<int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(i % 7) - 3.0);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;
  auto write = [&](const std::string& name, const SafetensorsFile& file) {
    const kda::Status s = kda::io::write_safetensors(dir + "/" + name, file);
    if (!s.ok()) {
      std::fprintf(stderr, "make_seeds: %s\n", s.message.c_str());
      ok = false;
    }
  };

  WyDqkgConfig fixed;  // fixed length, a tail chunk, f32
  fixed.B = 1;
  fixed.T = 20;
  fixed.H = 1;
  fixed.K = 4;
  fixed.V = 4;
  fixed.BT = 16;
  fixed.x_dtype = DType::f32;
  fixed.seed = 1;
  write("problem_fixed_f32.safetensors", solved(fixed));

  WyDqkgConfig varlen;  // cu_seqlens + chunk_indices, GVA, state_v_first, bf16 states
  varlen.B = 1;
  varlen.H = 1;
  varlen.HV = 2;
  varlen.K = 4;
  varlen.V = 3;
  varlen.BT = 16;
  varlen.x_dtype = DType::bf16;
  varlen.h_dtype = DType::bf16;
  varlen.beta_dtype = DType::bf16;
  varlen.seqlens = {5, 17, 0};
  varlen.pass_chunk_indices = true;
  varlen.state_v_first = true;
  varlen.scale = 0.5;
  varlen.seed = 2;
  write("problem_varlen_bf16.safetensors", solved(varlen));

  WyDqkgConfig half;  // two batch rows, BT = 32, f16 states
  half.B = 2;
  half.T = 9;
  half.H = 1;
  half.K = 3;
  half.V = 2;
  half.BT = 32;
  half.x_dtype = DType::f16;
  half.h_dtype = DType::f16;
  half.seed = 3;
  write("problem_f16.safetensors", solved(half));

  SafetensorsFile plain;  // every dtype, a scalar, an empty tensor, rank 6, metadata
  plain.tensors["half"] = ramp(DType::f16, {3, 2});
  plain.tensors["bf"] = ramp(DType::bf16, {3});
  plain.tensors["single"] = ramp(DType::f32, {2, 1, 2});
  plain.tensors["double"] = ramp(DType::f64, {2});
  plain.tensors["i32"] = ramp(DType::i32, {2});
  plain.tensors["i64"] = ramp(DType::i64, {1, 2});
  plain.tensors["scalar"] = ramp(DType::f32, {});
  plain.tensors["empty"] = ramp(DType::f16, {0, 3});
  plain.tensors["rank6"] = ramp(DType::f32, {1, 2, 1, 1, 1, 2});
  plain.metadata["scale"] = "0.125";
  plain.metadata["note"] = "unicode \xce\xbb";
  write("plain_every_dtype.safetensors", plain);

  write("empty.safetensors", SafetensorsFile{});
  return ok ? 0 : 1;
}
