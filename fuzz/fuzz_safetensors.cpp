// fuzz_safetensors: parse_safetensors on arbitrary bytes, and what its header promises:
//   - a rejected file gives one line starting "safetensors: " and leaves *out untouched;
//   - an accepted file serializes, re-parses to the same tensors and metadata, and the writer is
//     deterministic (serializing the re-parsed file gives the same bytes);
//   - when the tensors form a problem (problem_from_safetensors), it validates, runs on cpu-ref
//     and cpu writing every output element, and survives problem_to_safetensors and back.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "io/host_problem.hpp"
#include "io/safetensors.hpp"
#include "kda/kda.hpp"

namespace {

using kda::Status;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::io::SafetensorsFile;

bool same_tensors(const std::map<std::string, HostTensor>& a,
                  const std::map<std::string, HostTensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    const auto it = b.find(name);
    if (it == b.end()) return false;
    const HostTensor& u = it->second;
    if (t.dtype != u.dtype || t.shape != u.shape || t.bytes != u.bytes) return false;
  }
  return true;
}

// The writer and reader agree: bytes -> file -> bytes -> file is the identity on the second
// round, and the file in between holds what the first parse gave.
void check_round_trip(const SafetensorsFile& file) {
  std::vector<uint8_t> bytes;
  const Status w = kda::io::serialize_safetensors(file, &bytes);
  KDA_FUZZ_CHECK(w.ok(), "a parsed file does not serialize: %s", w.message.c_str());
  SafetensorsFile again;
  const Status r = kda::io::parse_safetensors(bytes.data(), bytes.size(), &again);
  KDA_FUZZ_CHECK(r.ok(), "the writer's own output does not parse: %s", r.message.c_str());
  KDA_FUZZ_CHECK(same_tensors(file.tensors, again.tensors), "round trip changed the tensors");
  KDA_FUZZ_CHECK(file.metadata == again.metadata, "round trip changed the metadata");
  std::vector<uint8_t> bytes2;
  KDA_FUZZ_CHECK(kda::io::serialize_safetensors(again, &bytes2).ok(), "second serialize failed");
  KDA_FUZZ_CHECK(bytes == bytes2, "the writer is not deterministic");
}

// Small enough to run both CPU backends on every input: the references cost about
// T * HV * K * (V or BT) per batch row. B, T, K from the operator's anchor (its first input: q,
// or chunk_fwd_h's k, [B, T, H, K]), V from its value tensor, HV from g or w.
bool small_enough_to_run(const HostProblem& p) {
  const auto& x = p.get(kda::io::op_of(p).input_names().front()).shape;
  int64_t inner = 64;  // BT at most
  for (const char* values : {"v", "u", "do"}) {
    if (p.has(values)) inner = std::max<int64_t>(inner, p.get(values).shape.back());
  }
  int64_t heads = x[2];
  for (const char* per_value_head : {"w", "g"}) {
    if (p.has(per_value_head)) heads = std::max<int64_t>(heads, p.get(per_value_head).shape[2]);
  }
  const int64_t work = x[0] * x[1] * heads * x[3] * inner;
  return work <= (int64_t{1} << 22);
}

void check_runs(HostProblem& p) {
  const kda::io::OpIo& op = kda::io::op_of(p);
  const kda::Status valid = op.validate(p);
  KDA_FUZZ_CHECK(valid.ok(), "problem_from_safetensors accepted a problem validate() rejects: %s",
                 valid.message.c_str());
  if (!small_enough_to_run(p)) return;
  for (kda::Backend backend : {kda::Backend::cpu_ref, kda::Backend::cpu}) {
    for (const std::string& name : p.output_names()) {
      HostTensor& out = p.get(name);
      kda::fuzz::poison(out.bytes.data(), out.dtype, out.numel());
    }
    const kda::Status s = op.run(p.views(), p, backend, nullptr, kda::Kernel::auto_);
    KDA_FUZZ_CHECK(s.ok(), "%s %s failed on a valid problem: %s", op.name,
                   std::string(kda::backend_name(backend)).c_str(), s.message.c_str());
    for (const std::string& name : p.output_names()) {
      const HostTensor& out = p.get(name);
      const size_t elem = kda::dtype_size(out.dtype);
      for (int64_t i = 0; i < out.numel(); ++i) {
        KDA_FUZZ_CHECK(!kda::fuzz::is_poison(out.bytes.data() + i * elem, out.dtype),
                       "%s %s left %s[%lld] unwritten", op.name,
                       std::string(kda::backend_name(backend)).c_str(), name.c_str(),
                       static_cast<long long>(i));
      }
    }
  }
}

// problem -> file -> bytes -> file -> problem keeps every input, output and option.
void check_problem_round_trip(const HostProblem& p) {
  const SafetensorsFile file = kda::io::problem_to_safetensors(p);
  std::vector<uint8_t> bytes;
  const Status w = kda::io::serialize_safetensors(file, &bytes);
  KDA_FUZZ_CHECK(w.ok(), "problem_to_safetensors gave an unwritable file: %s", w.message.c_str());
  SafetensorsFile parsed;
  KDA_FUZZ_CHECK(kda::io::parse_safetensors(bytes.data(), bytes.size(), &parsed).ok(),
                 "re-parse of a written problem failed");
  HostProblem back;
  std::map<std::string, HostTensor> expected;
  const Status s = kda::io::problem_from_safetensors(parsed, kda::io::op_of(p), &back, &expected);
  KDA_FUZZ_CHECK(s.ok(), "a written problem does not load again: %s", s.message.c_str());
  KDA_FUZZ_CHECK(back.options == p.options, "an option changed in the round trip");
  for (const auto& [name, t] : p.tensors) {
    const bool is_output = expected.count(name) != 0;
    const HostTensor& u = is_output ? expected.at(name) : back.get(name);
    KDA_FUZZ_CHECK(t.dtype == u.dtype && t.shape == u.shape && t.bytes == u.bytes,
                   "tensor %s changed in the problem round trip", name.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A sentinel in *out: a failed parse must leave it as it was.
  SafetensorsFile file;
  file.metadata["sentinel"] = "untouched";
  const Status s = kda::io::parse_safetensors(data, size, &file);
  if (!s.ok()) {
    KDA_FUZZ_CHECK(s.code == kda::StatusCode::invalid_argument, "unexpected status code %d",
                   static_cast<int>(s.code));
    KDA_FUZZ_CHECK(s.message.rfind("safetensors: ", 0) == 0, "message lacks the prefix: %s",
                   s.message.c_str());
    KDA_FUZZ_CHECK(s.message.find('\n') == std::string::npos, "message is not one line: %s",
                   s.message.c_str());
    KDA_FUZZ_CHECK(file.tensors.empty() && file.metadata.size() == 1 &&
                       file.metadata.at("sentinel") == "untouched",
                   "a failed parse modified *out");
    return 0;
  }
  check_round_trip(file);

  // Every operator reads the file its own way: each must load it or refuse it cleanly.
  for (const kda::io::OpIo* op : kda::io::ops()) {
    HostProblem problem;
    std::map<std::string, HostTensor> expected;
    const Status p = kda::io::problem_from_safetensors(file, *op, &problem, &expected);
    if (!p.ok()) {
      KDA_FUZZ_CHECK(p.message.rfind("safetensors: ", 0) == 0, "message lacks the prefix: %s",
                     p.message.c_str());
      KDA_FUZZ_CHECK(p.message.find('\n') == std::string::npos, "message is not one line: %s",
                     p.message.c_str());
      continue;
    }
    check_runs(problem);
    check_problem_round_trip(problem);
  }
  return 0;
}
