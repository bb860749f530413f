#include "intra_problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>

#include "io/safetensors.hpp"
#include "ops/chunk_bwd_intra/backends.hpp"

namespace kda::testing::intra {

std::string spec_name(const std::string& output) {
  return output.substr(0, output.size() - std::string("_out").size());
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::padded:
      return "padded";
    case Layout::channel_strided:
      return "channel_strided";
    case Layout::time_major:
      return "time_major";
  }
  return "?";
}

const io::HostTensor& HostIntra::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error("missing tensor '" + name + "'");
  return it->second;
}

io::HostTensor& HostIntra::get(const std::string& name) {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error("missing tensor '" + name + "'");
  return it->second;
}

void HostIntra::allocate_outputs() {
  const std::vector<int64_t>& gs = get("g").shape;  // [B, T, HV, K]
  auto poisoned = [](std::vector<int64_t> shape) {
    io::HostTensor t(DType::f32, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, std::numeric_limits<double>::quiet_NaN());
    return t;
  };
  tensors["dq_out"] = poisoned(gs);
  tensors["dk_out"] = poisoned(gs);
  tensors["dg_out"] = poisoned(gs);
  tensors["db_out"] = poisoned({gs[0], gs[1], gs[2]});
}

std::vector<ChunkRange> chunk_ranges(const HostIntra& host) {
  const std::vector<int64_t>& qs = host.get("q").shape;
  const int64_t B = qs[0], T = qs[1], BT = host.chunk_size;
  std::vector<ChunkRange> ranges;
  if (!host.has("cu_seqlens")) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t0 = 0; t0 < T; t0 += BT) ranges.push_back({b, t0, std::min(t0 + BT, T)});
    }
    return ranges;
  }
  const io::HostTensor& cu = host.get("cu_seqlens");
  for (int64_t n = 0; n + 1 < cu.numel(); ++n) {
    const auto bos = static_cast<int64_t>(cu.at(n)), eos = static_cast<int64_t>(cu.at(n + 1));
    for (int64_t t0 = bos; t0 < eos; t0 += BT) ranges.push_back({0, t0, std::min(t0 + BT, eos)});
  }
  return ranges;
}

ChunkBwdIntraDims HostIntra::dims(bool nt_upper_bound) const {
  const std::vector<int64_t>& qs = get("q").shape;
  ChunkBwdIntraDims d;
  d.B = qs[0];
  d.T = qs[1];
  d.H = qs[2];
  d.K = qs[3];
  d.HV = get("g").shape[2];
  d.BT = chunk_size;
  d.varlen = has("cu_seqlens");
  d.num_seqs = d.varlen ? get("cu_seqlens").numel() - 1 : d.B;
  d.x_dtype = get("q").dtype;
  d.beta_dtype = get("beta").dtype;
  if (!d.varlen) {
    d.NT = (d.T + d.BT - 1) / d.BT;
  } else if (has("chunk_indices")) {
    d.NT = get("chunk_indices").shape[0];
  } else if (nt_upper_bound) {
    d.NT = std::min(d.T, d.T / d.BT + d.num_seqs);
  } else {
    d.NT = static_cast<int64_t>(chunk_ranges(*this).size());
  }
  return d;
}

std::string HostIntra::describe() const {
  const ChunkBwdIntraDims d = dims();
  std::string s =
      "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " H=" + std::to_string(d.H) +
      " HV=" + std::to_string(d.HV) + " K=" + std::to_string(d.K) + " BT=" + std::to_string(d.BT) +
      " X=" + std::string(dtype_name(d.x_dtype)) +
      " beta=" + std::string(dtype_name(d.beta_dtype)) + (safe_gate ? " safe_gate" : "");
  if (d.varlen) {
    const io::HostTensor& cu = get("cu_seqlens");
    s += " cu_seqlens=[";
    for (int64_t i = 0; i < cu.numel(); ++i) {
      if (i > 0) s += ",";
      s += std::to_string(static_cast<int64_t>(cu.at(i)));
    }
    s += "] " + std::string(dtype_name(cu.dtype)) +
         (has("chunk_indices") ? " with chunk_indices" : " without chunk_indices");
  }
  for (const auto& [name, layout] : layouts) {
    if (layout != Layout::contiguous) s += " " + name + ":" + layout_name(layout);
  }
  return s;
}

HostIntra make_random(const Config& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);

  HostIntra hp;
  hp.chunk_size = c.BT;
  hp.safe_gate = c.safe_gate;
  int64_t B = c.B, T = c.T;
  if (!c.seqlens.empty()) {
    B = 1;
    T = 0;
    for (int64_t len : c.seqlens) T += len;
    io::HostTensor cu(c.index_dtype, {static_cast<int64_t>(c.seqlens.size()) + 1});
    int64_t bos = 0;
    for (size_t n = 0; n < c.seqlens.size(); ++n) {
      bos += c.seqlens[n];
      cu.set(static_cast<int64_t>(n) + 1, static_cast<double>(bos));
    }
    hp.tensors["cu_seqlens"] = cu;
  }
  const int64_t H = c.H, HV = c.HV == 0 ? c.H : c.HV, K = c.K, BT = c.BT;

  // q, k: unit-norm rows over K (then rounded to X).
  for (const char* name : {"q", "k"}) {
    io::HostTensor t(c.x_dtype, {B, T, H, K});
    std::vector<double> row(static_cast<size_t>(K));
    for (int64_t r = 0; r < B * T * H; ++r) {
      double norm = 0.0;
      for (double& x : row) {
        x = normal(rng);
        norm += x * x;
      }
      norm = std::sqrt(norm);
      for (int64_t e = 0; e < K; ++e) t.set(r * K + e, row[static_cast<size_t>(e)] / norm);
    }
    hp.tensors[name] = t;
  }
  // The chunks (chunk_ranges needs only q, cu_seqlens and chunk_size): where g's cumsum restarts
  // and which dA entries are read.
  const std::vector<ChunkRange> ranges = chunk_ranges(hp);

  // g: chunk-local cumsum of log2 decays.
  constexpr double kLn2 = 0.6931471805599453;
  io::HostTensor g(DType::f32, {B, T, HV, K});
  for (const ChunkRange& ch : ranges) {
    for (int64_t hv = 0; hv < HV; ++hv) {
      for (int64_t k = 0; k < K; ++k) {
        const bool strong = c.all_strong || (hv + k) % 4 == 1;
        double sum = 0.0;
        for (int64_t t = ch.t0; t < ch.t1; ++t) {
          const double ln_decay =
              strong ? -4.6 - 0.4 * uniform(rng) : -std::exp(std::log(1e-3) * uniform(rng));
          sum += ln_decay / kLn2;
          g.set(((ch.b * T + t) * HV + hv) * K + k, sum);
        }
      }
    }
  }
  hp.tensors["g"] = g;

  io::HostTensor beta(c.beta_dtype, {B, T, HV});
  for (int64_t i = 0; i < beta.numel(); ++i) beta.set(i, 0.05 + 0.9 * uniform(rng));
  hp.tensors["beta"] = beta;

  // dA: N(0, 1) where j <= i inside the chunk, garbage everywhere else of the BT columns.
  const double garbage[] = {std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(), 100.0,
                            -std::numeric_limits<double>::infinity()};
  for (const char* name : {"dAqk", "dAkk"}) {
    io::HostTensor t(DType::f32, {B, T, HV, BT});
    int64_t n_garbage = 0;
    for (const ChunkRange& ch : ranges) {
      for (int64_t t_ = ch.t0; t_ < ch.t1; ++t_) {
        const int64_t i = t_ - ch.t0;
        for (int64_t hv = 0; hv < HV; ++hv) {
          for (int64_t j = 0; j < BT; ++j) {
            const double value = j <= i ? normal(rng) : garbage[n_garbage++ % 4];
            t.set(((ch.b * T + t_) * HV + hv) * BT + j, value);
          }
        }
      }
    }
    hp.tensors[name] = t;
  }

  auto filled = [&](std::vector<int64_t> shape, double rms) {
    io::HostTensor t(DType::f32, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rms * normal(rng));
    return t;
  };
  hp.tensors["dq"] = filled({B, T, HV, K}, 0.1);
  hp.tensors["dk"] = filled({B, T, HV, K}, 0.1);
  hp.tensors["db"] = filled({B, T, HV}, 0.1);
  hp.tensors["dg"] = filled({B, T, HV, K}, 0.02);

  if (!c.seqlens.empty() && c.pass_chunk_indices) {
    const auto NT = static_cast<int64_t>(ranges.size());
    io::HostTensor ci(c.index_dtype, {NT, 2});
    int64_t row = 0;
    for (size_t n = 0; n < c.seqlens.size(); ++n) {
      const int64_t chunks = (c.seqlens[n] + BT - 1) / BT;
      for (int64_t k = 0; k < chunks; ++k, ++row) {
        ci.set(2 * row, static_cast<double>(n));
        ci.set(2 * row + 1, static_cast<double>(k));
      }
    }
    hp.tensors["chunk_indices"] = ci;
  }
  hp.allocate_outputs();
  return hp;
}

Status load_golden(const std::string& path, HostIntra* out,
                   std::map<std::string, io::HostTensor>* expected) {
  io::SafetensorsFile file;
  if (Status s = io::read_safetensors(path, &file); !s.ok()) return s;
  HostIntra hp;
  for (const char* name : kInputNames) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      return invalid_argument(path + ": no tensor '" + std::string(name) + "'");
    }
    hp.tensors[name] = it->second;
  }
  for (const char* name : {"cu_seqlens", "chunk_indices"}) {
    if (auto it = file.tensors.find(name); it != file.tensors.end()) hp.tensors[name] = it->second;
  }
  expected->clear();
  for (const char* output : kOutputNames) {
    const std::string name = "out." + spec_name(output);
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) return invalid_argument(path + ": no tensor '" + name + "'");
    (*expected)[spec_name(output)] = it->second;
  }
  auto meta = file.metadata.find("chunk_size");
  hp.chunk_size =
      meta != file.metadata.end() ? std::stoll(meta->second) : hp.get("dAqk").shape.back();
  meta = file.metadata.find("safe_gate");
  hp.safe_gate = meta != file.metadata.end() && meta->second == "true";
  hp.allocate_outputs();
  *out = std::move(hp);
  return Status::Ok();
}

std::array<int64_t, kMaxRank> layout_strides(const std::vector<int64_t>& shape, Layout layout) {
  const int rank = static_cast<int>(shape.size());
  std::vector<int> order(static_cast<size_t>(rank));  // memory order, outermost first
  for (int d = 0; d < rank; ++d) order[static_cast<size_t>(d)] = d;
  if (layout == Layout::channel_strided && rank >= 2) {
    std::swap(order[static_cast<size_t>(rank - 1)], order[static_cast<size_t>(rank - 2)]);
  }
  if (layout == Layout::time_major && rank >= 2) std::swap(order[0], order[1]);
  std::array<int64_t, kMaxRank> strides{};
  int64_t stride = 1;
  for (int m = rank - 1; m >= 0; --m) {
    const int d = order[static_cast<size_t>(m)];
    strides[static_cast<size_t>(d)] = stride;
    stride *= shape[static_cast<size_t>(d)] + (layout == Layout::padded && m == rank - 1 ? 3 : 0);
  }
  return strides;
}

int64_t layout_span(const std::vector<int64_t>& shape,
                    const std::array<int64_t, kMaxRank>& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

StridedInputs::StridedInputs(const HostIntra& host)
    : safe_gate_(host.safe_gate), chunk_size_(host.chunk_size) {
  for (const auto& [name, tensor] : host.tensors) {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, "_out") == 0) continue;  // outputs
    auto it = host.layouts.find(name);
    const Layout layout = it == host.layouts.end() ? Layout::contiguous : it->second;
    const std::array<int64_t, kMaxRank> strides = layout_strides(tensor.shape, layout);
    const size_t item = dtype_size(tensor.dtype);
    // Gaps hold all-ones bytes: NaN in every float dtype, so a read of a gap shows.
    std::vector<uint8_t> bytes(static_cast<size_t>(layout_span(tensor.shape, strides)) * item,
                               0xff);
    const int rank = static_cast<int>(tensor.shape.size());
    std::vector<int64_t> index(static_cast<size_t>(rank), 0);
    for (int64_t e = 0; e < tensor.numel(); ++e) {
      int64_t offset = 0;
      for (int d = 0; d < rank; ++d) offset += index[static_cast<size_t>(d)] * strides[d];
      std::memcpy(bytes.data() + offset * item, tensor.bytes.data() + e * item, item);
      for (int d = rank - 1; d >= 0; --d) {  // next row-major index
        if (++index[static_cast<size_t>(d)] < tensor.shape[static_cast<size_t>(d)]) break;
        index[static_cast<size_t>(d)] = 0;
      }
    }
    TensorView view = tensor.view();
    view.data = nullptr;
    view.strides = strides;
    views_[name] = view;
    storage_[name] = std::move(bytes);
  }
}

ChunkBwdIntraProblem StridedInputs::problem(HostIntra& host) const {
  auto input = [&](const char* name) {
    auto it = views_.find(name);
    if (it == views_.end()) return TensorView{};
    TensorView v = it->second;
    v.data = const_cast<uint8_t*>(storage_.at(name).data());
    return v;
  };
  ChunkBwdIntraProblem p;
  p.q = input("q");
  p.k = input("k");
  p.g = input("g");
  p.beta = input("beta");
  p.dAqk = input("dAqk");
  p.dAkk = input("dAkk");
  p.dq = input("dq");
  p.dk = input("dk");
  p.db = input("db");
  p.dg = input("dg");
  p.cu_seqlens = input("cu_seqlens");
  p.chunk_indices = input("chunk_indices");
  p.dq_out = host.get("dq_out").view();
  p.dk_out = host.get("dk_out").view();
  p.db_out = host.get("db_out").view();
  p.dg_out = host.get("dg_out").view();
  p.chunk_size = chunk_size_;
  p.safe_gate = safe_gate_;
  return p;
}

Status run_cpu_backend(CpuBackend backend, HostIntra& host) {
  const StridedInputs inputs(host);
  const ChunkBwdIntraProblem problem = inputs.problem(host);
  const ChunkBwdIntraDims dims = host.dims();
  return backend == CpuBackend::cpu_ref ? detail::run_chunk_bwd_intra_cpu_ref(problem, dims)
                                        : detail::run_chunk_bwd_intra_cpu(problem, dims);
}

double pass_bar(DType x_dtype) {
  switch (x_dtype) {
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 1.5e-3;
    default:
      return 2e-3;
  }
}

double golden_bar(DType x_dtype) {
  switch (x_dtype) {
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 5e-4;
    default:
      return 2e-3;
  }
}

int64_t count_non_finite(const io::HostTensor& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += std::isfinite(t.at(i)) ? 0 : 1;
  return n;
}

bool bitwise_equal(const io::HostTensor& a, const io::HostTensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes;
}

}  // namespace kda::testing::intra
