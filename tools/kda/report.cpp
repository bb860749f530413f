#include "report.hpp"

#include <algorithm>
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

void print_row(const std::string& label, const std::string& text) {
  std::printf("  %-8s %s\n", label.c_str(), text.c_str());
}

}  // namespace

void print_problem(const std::string& source, const io::OpIo& op, const io::HostProblem& problem,
                   const ProblemSummary& d, Backend backend, Kernel kernel) {
  std::printf("kda run: %s\n", source.c_str());
  print_row("operator",
            std::string(op.name) + " (kda_kernels." + op.fla_name + ", " + op.spec + ")");
  std::string sizes = d.sizes;
  if (d.varlen) {
    sizes += " (" + std::to_string(d.num_seqs) + " sequences" +
             (problem.has("chunk_indices") ? ", chunk_indices given" : "") + ")";
  }
  print_row("problem", sizes);
  for (const auto& [label, text] : d.details) print_row(label, text);
  // One word on the backend line: scripts read it (dev/gpu-check.sh).
  print_row("backend", std::string(backend_name(backend)));
  print_row("kernel", std::string(kernel_name(kernel)));
}

void print_check(const CheckReport& r) {
  std::printf("\ncheck against %s, %s; compared %s\n", r.against.c_str(), r.bar_name.c_str(),
              r.scope.c_str());
  int width = 8;
  for (const OutputError& e : r.errors) width = std::max(width, static_cast<int>(e.name.size()));
  std::printf("  %-*s %-12s %-10s %s\n", width, "output", "err_ratio", "bar", "result");
  int failed = 0;
  for (const OutputError& e : r.errors) {
    const bool ok = e.within_bar();
    failed += ok ? 0 : 1;
    std::printf("  %-*s %-12.3e %-10.1e %s\n", width, e.name.c_str(), e.err, e.bar,
                ok ? "ok" : "FAIL");
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

void print_timing(Backend backend, const Timing& t, std::pair<int64_t, int64_t> bytes) {
  const int64_t total = bytes.first + bytes.second;
  // One row per statistic, so `grep median` finds the figure itself.
  const auto gb_per_s = [&](double ms) {
    return ms > 0 ? static_cast<double>(total) / (ms * 1e-3) * 1e-9 : 0.0;
  };
  std::printf(
      "\ntiming: %s, %zu timed run%s after 1 warm-up; bytes = inputs read once + outputs "
      "written once\n",
      std::string(backend_name(backend)).c_str(), t.ms.size(), t.ms.size() == 1 ? "" : "s");
  std::printf("  %-8s %-12s %s\n", "", "time", "GB/s");
  std::printf("  %-8s %-12s %.2f\n", "median", format_time(t.median_ms()).c_str(),
              gb_per_s(t.median_ms()));
  std::printf("  %-8s %-12s %.2f\n", "min", format_time(t.min_ms()).c_str(), gb_per_s(t.min_ms()));
  std::printf("  %-8s %s (read %s, written %s)\n", "bytes", format_bytes(total).c_str(),
              format_bytes(bytes.first).c_str(), format_bytes(bytes.second).c_str());
  if (backend == Backend::cuda) {
    std::printf(
        "  note: the same inputs every run (no L2 flush or rotation), so a problem that fits in "
        "L2 is flattered; bench/ measures that properly\n");
  }
}

}  // namespace kda::cli
