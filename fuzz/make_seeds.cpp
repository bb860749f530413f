// Writes seeds of the fuzzers, committed under fuzz/corpus/<target>/:
//   - fuzz_safetensors: a few small valid files of the operators that reach every part of the
//     reader and of problem_from_safetensors, and one that names a tensor twice;
//   - fuzz_problem (with a second directory): chunk_bwd_intra's, chunk_bwd_epilogue's and
//     chunk_bwd_prep's starting inputs, the byte (1, 2, 3) that picks the operator followed by
//     fixed pseudo-random bytes (the harness decodes any bytes into a problem; the corpus then
//     grows from them, KDA_FUZZ_UPDATE_CORPUS=1 fuzz/run.sh).
// Rerun it only when the file layout or the harness's decoding changes:
//   build-fuzz/fuzz/fuzz_make_seeds fuzz/corpus/fuzz_safetensors [fuzz/corpus/fuzz_problem]

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "io/safetensors.hpp"
#include "kda/kda.hpp"

namespace {

using kda::DType;
using kda::io::DhuConfig;
using kda::io::FwdHConfig;
using kda::io::HostTensor;
using kda::io::IntraConfig;
using kda::io::SafetensorsFile;
using kda::io::WyDqkgConfig;

// A problem of either operator with its cpu-ref outputs as out.<name>, like the golden files but
// tiny.
template <typename Config>
SafetensorsFile solved(const Config& c) {
  kda::io::HostProblem p = kda::io::make_random_problem(c);
  const kda::Status s =
      kda::io::op_of(p).run(p.views(), p, kda::Backend::cpu_ref, nullptr, kda::Kernel::auto_);
  if (!s.ok()) std::fprintf(stderr, "make_seeds: %s\n", s.message.c_str());
  return kda::io::problem_to_safetensors(p);
}

// fuzz_problem's input for operator `op` (its index in the harness's kOperators): the byte that
// picks it, then `length` bytes of a fixed splitmix64 stream from `seed`.
std::vector<uint8_t> problem_input(uint8_t op, uint64_t seed, size_t length) {
  std::vector<uint8_t> bytes{op};
  uint64_t state = seed;
  while (bytes.size() < length + 1) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    bytes.push_back(static_cast<uint8_t>(z ^ (z >> 31)));
  }
  return bytes;
}

// `file` with a second header entry for tensor `name` holding `like`'s bytes (appended to the data
// section): a name given twice, which the writer cannot produce and the reader refuses.
std::vector<uint8_t> named_twice(const SafetensorsFile& file, const std::string& name,
                                 const std::string& like) {
  std::vector<uint8_t> bytes;
  if (!kda::io::serialize_safetensors(file, &bytes).ok()) return bytes;
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t{bytes[i]} << (8 * i);
  const std::string text(bytes.begin() + 8, bytes.begin() + 8 + static_cast<ptrdiff_t>(length));
  const nlohmann::json header = nlohmann::json::parse(text);
  std::vector<uint8_t> data(bytes.begin() + 8 + static_cast<ptrdiff_t>(length), bytes.end());
  nlohmann::json second = header.at(like);
  const uint64_t begin = second["data_offsets"][0], end = second["data_offsets"][1];
  second["data_offsets"] = {data.size(), data.size() + end - begin};
  data.insert(data.end(), data.begin() + static_cast<ptrdiff_t>(begin),
              data.begin() + static_cast<ptrdiff_t>(end));
  const std::string dumped = header.dump();
  const std::string twice =
      dumped.substr(0, dumped.size() - 1) + ",\"" + name + "\":" + second.dump() + "}";
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(uint64_t{twice.size()} >> (8 * i));
  out.insert(out.end(), twice.begin(), twice.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

HostTensor ramp(DType dtype, std::vector<int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(i % 7) - 3.0);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s SAFETENSORS_SEED_DIR [PROBLEM_SEED_DIR]\n", argv[0]);
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
  auto write_bytes_in = [&](const std::string& folder, const std::string& name,
                            const std::vector<uint8_t>& bytes) {
    std::FILE* f = std::fopen((folder + "/" + name).c_str(), "wb");
    const bool written =
        f != nullptr && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (f == nullptr || std::fclose(f) != 0 || !written || bytes.empty()) {
      std::fprintf(stderr, "make_seeds: cannot write %s\n", name.c_str());
      ok = false;
    }
  };
  auto write_bytes = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    write_bytes_in(dir, name, bytes);
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
  // q given twice, the second time with k's values: refused, naming q.
  write_bytes("problem_q_named_twice.safetensors", named_twice(solved(fixed), "q", "k"));

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

  IntraConfig intra;  // chunk_bwd_intra, fixed length with a tail chunk, f32, GVA
  intra.B = 1;
  intra.T = 20;
  intra.H = 1;
  intra.HV = 2;
  intra.K = 5;
  intra.BT = 16;
  intra.x_dtype = DType::f32;
  intra.seed = 4;
  write("problem_intra_fixed_f32.safetensors", solved(intra));

  IntraConfig intra_varlen;  // cu_seqlens + int32 chunk_indices, bf16 with beta in X, safe_gate
  intra_varlen.B = 1;
  intra_varlen.H = 1;
  intra_varlen.K = 4;
  intra_varlen.BT = 16;
  intra_varlen.x_dtype = DType::bf16;
  intra_varlen.beta_dtype = DType::bf16;
  intra_varlen.seqlens = {5, 17, 0};
  intra_varlen.pass_chunk_indices = true;
  intra_varlen.index_dtype = DType::i32;
  intra_varlen.safe_gate = true;
  intra_varlen.seed = 5;
  write("problem_intra_varlen_bf16.safetensors", solved(intra_varlen));

  DhuConfig dhu;  // chunk_bwd_dhu, fixed length with a tail chunk, f32, both gates, GVA
  dhu.B = 2;
  dhu.T = 20;
  dhu.H = 1;
  dhu.HV = 2;
  dhu.K = 3;
  dhu.V = 2;
  dhu.BT = 16;
  dhu.x_dtype = DType::f32;
  dhu.use_g = true;
  dhu.seed = 6;
  write("problem_dhu_fixed_f32.safetensors", solved(dhu));

  DhuConfig dhu_varlen;  // an empty sequence, int32 chunk_indices, states [.., V, K] in X, no h0
  dhu_varlen.B = 1;
  dhu_varlen.H = 1;
  dhu_varlen.K = 2;
  dhu_varlen.V = 3;
  dhu_varlen.BT = 16;
  dhu_varlen.x_dtype = DType::bf16;
  dhu_varlen.state_dtype = DType::bf16;
  dhu_varlen.seqlens = {5, 0, 17};
  dhu_varlen.pass_chunk_indices = true;
  dhu_varlen.index_dtype = DType::i32;
  dhu_varlen.state_v_first = true;
  dhu_varlen.with_h0 = false;
  dhu_varlen.scale = 0.5;
  dhu_varlen.seed = 7;
  write("problem_dhu_varlen_bf16.safetensors", solved(dhu_varlen));

  FwdHConfig fwd_h;  // chunk_fwd_h, fixed length with a tail chunk, f32, both gates, GVA
  fwd_h.B = 2;
  fwd_h.T = 20;
  fwd_h.H = 1;
  fwd_h.HV = 2;
  fwd_h.K = 3;
  fwd_h.V = 2;
  fwd_h.BT = 16;
  fwd_h.x_dtype = DType::f32;
  fwd_h.use_g = true;
  fwd_h.seed = 8;
  write("problem_fwd_h_fixed_f32.safetensors", solved(fwd_h));

  // An empty sequence, int32 chunk_indices, states [.., V, K], initial_state in X, fla's
  // switches flipped.
  FwdHConfig fwd_h_varlen;
  fwd_h_varlen.B = 1;
  fwd_h_varlen.H = 1;
  fwd_h_varlen.K = 2;
  fwd_h_varlen.V = 3;
  fwd_h_varlen.BT = 16;
  fwd_h_varlen.x_dtype = DType::bf16;
  fwd_h_varlen.state_dtype = DType::bf16;
  fwd_h_varlen.seqlens = {5, 0, 17};
  fwd_h_varlen.pass_chunk_indices = true;
  fwd_h_varlen.index_dtype = DType::i32;
  fwd_h_varlen.state_v_first = true;
  fwd_h_varlen.output_final_state = true;
  fwd_h_varlen.save_new_value = false;
  fwd_h_varlen.seed = 9;
  write("problem_fwd_h_varlen_bf16.safetensors", solved(fwd_h_varlen));

  if (argc == 3) {
    // chunk_bwd_intra, chunk_bwd_epilogue and chunk_bwd_prep are operators 1, 2 and 3 of
    // fuzz_problem; 8 inputs of 96 bytes each.
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      write_bytes_in(argv[2], "intra_seed_" + std::to_string(seed), problem_input(1, seed, 96));
      write_bytes_in(argv[2], "epilogue_seed_" + std::to_string(seed), problem_input(2, seed, 96));
      write_bytes_in(argv[2], "prep_seed_" + std::to_string(seed), problem_input(3, seed, 96));
    }
  }
  return ok ? 0 : 1;
}
