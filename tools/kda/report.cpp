#include "report.hpp"

#include <cstdio>

namespace kda::cli {

namespace {

// 0.0123 ms -> "12.3 us"; 12.3 ms -> "12.300 ms"; 12300 ms -> "12.300 s".
std::string format_time(double ms) {
  char text[32];
  if (ms < 1.0) {
    std::snprintf(text, sizeof text, "%.1f us", ms * 1e3);
  } else if (ms < 1e3) {
    std::snprintf(text, sizeof text, "%.3f ms", ms);
  } else {
    std::snprintf(text, sizeof text, "%.3f s", ms * 1e-3);
  }
  return text;
}

std::string format_bytes(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b < 1e6) {
    std::snprintf(text, sizeof text, "%.1f KB", b * 1e-3);
  } else if (b < 1e9) {
    std::snprintf(text, sizeof text, "%.1f MB", b * 1e-6);
  } else {
    std::snprintf(text, sizeof text, "%.2f GB", b * 1e-9);
  }
  return text;
}

}  // namespace

int64_t bytes_moved(const io::HostProblem& problem) {
  int64_t bytes = 0;
  for (const auto& [name, t] : problem.tensors) bytes += static_cast<int64_t>(t.bytes.size());
  return bytes;
}

void print_problem(const std::string& source, const io::HostProblem& problem, const Dims& d,
                   Backend backend) {
  std::printf("kda run: %s\n", source.c_str());
  std::printf("  problem  B=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld BT=%lld NT=%lld",
              static_cast<long long>(d.B), static_cast<long long>(d.T), static_cast<long long>(d.H),
              static_cast<long long>(d.HV), static_cast<long long>(d.K),
              static_cast<long long>(d.V), static_cast<long long>(d.BT),
              static_cast<long long>(d.NT));
  if (d.varlen) {
    std::printf(" (%lld sequences%s)", static_cast<long long>(d.num_seqs),
                problem.has("chunk_indices") ? ", chunk_indices given" : "");
  }
  std::printf("\n");
  std::printf("  dtypes   X=%s h=%s beta=%s%s\n", std::string(dtype_name(d.x_dtype)).c_str(),
              std::string(dtype_name(d.h_dtype)).c_str(),
              std::string(dtype_name(d.beta_dtype)).c_str(),
              problem.state_v_first ? "  (h, dh stored [.., V, K])" : "");
  if (problem.scale) {
    std::printf("  scale    %g\n", *problem.scale);
  } else {
    std::printf("  scale    None (K ** -0.5 = %g)\n", problem.problem().effective_scale());
  }
  std::printf("  backend  %s\n", std::string(backend_name(backend)).c_str());
}

void print_check(const CheckReport& r) {
  std::printf("\ncheck against %s, %s; compared %s\n", r.against.c_str(), r.bar_name.c_str(),
              r.scope.c_str());
  std::printf("  %-8s %-12s %-10s %s\n", "output", "err_ratio", "bar", "result");
  int failed = 0;
  for (const OutputError& e : r.errors) {
    const bool ok = e.within_bar();
    failed += ok ? 0 : 1;
    std::printf("  %-8s %-12.3e %-10.1e %s\n", e.name.c_str(), e.err, e.bar, ok ? "ok" : "FAIL");
  }
  if (failed == 0) {
    std::printf("  PASS: all %zu outputs within the bar\n", r.errors.size());
  } else {
    std::printf("  FAIL: %d of %zu outputs above the bar (or not finite)\n", failed,
                r.errors.size());
  }
}

void print_check_skipped(const std::string& why) {
  std::printf("\ncheck skipped: %s\n", why.c_str());
}

void print_timing(Backend backend, const Timing& t, int64_t bytes) {
  // One row per statistic, so `grep median` finds the figure itself.
  const auto gb_per_s = [&](double ms) {
    return ms > 0 ? static_cast<double>(bytes) / (ms * 1e-3) * 1e-9 : 0.0;
  };
  std::printf(
      "\ntiming: %s, %zu timed run%s after 1 warm-up; bytes = inputs read once + outputs "
      "written once\n",
      std::string(backend_name(backend)).c_str(), t.ms.size(), t.ms.size() == 1 ? "" : "s");
  std::printf("  %-8s %-12s %s\n", "", "time", "GB/s");
  std::printf("  %-8s %-12s %.2f\n", "median", format_time(t.median_ms()).c_str(),
              gb_per_s(t.median_ms()));
  std::printf("  %-8s %-12s %.2f\n", "min", format_time(t.min_ms()).c_str(), gb_per_s(t.min_ms()));
  std::printf("  %-8s %s\n", "bytes", format_bytes(bytes).c_str());
  if (backend == Backend::cuda) {
    std::printf(
        "  note: the same inputs every run (no L2 flush or rotation), so a problem that fits in "
        "L2 is flattered; bench/ measures that properly\n");
  }
}

}  // namespace kda::cli
