#include "runner.hpp"

#include <algorithm>
#include <chrono>

#include "cuda_runner.hpp"

namespace kda::cli {

double Timing::median_ms() const {
  if (ms.empty()) return 0.0;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double Timing::min_ms() const {
  return ms.empty() ? 0.0 : *std::min_element(ms.begin(), ms.end());
}

Status run_timed(const io::OpIo& op, Backend backend, Kernel kernel, io::HostProblem* problem,
                 int repeat, Timing* timing) {
  if (backend == Backend::cuda) return run_timed_cuda(op, kernel, problem, repeat, timing);
  const std::map<std::string, TensorView> views = problem->views();
  const auto run_once = [&] { return op.run(views, *problem, backend, nullptr, kernel); };
  if (Status s = run_once(); !s.ok()) return s;  // warm-up: caches, thread pool, pages
  timing->ms.clear();
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (Status s = run_once(); !s.ok()) return s;
    const auto stop = std::chrono::steady_clock::now();
    timing->ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return Status::Ok();
}

}  // namespace kda::cli
