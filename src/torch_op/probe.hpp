#pragma once
// Where a compiled op's host time goes, for machines with no profiler (the H200 machines have no
// perf): off unless kda_torch_probe switches it on (bench/host_cost.py does, for one timed layer
// of its own); then each op call adds the time of its phases to per-process totals. Off, a call
// pays one relaxed atomic load per phase.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kda::torch_op::probe {

// An op call's phases, in order: the options and the input views; the output allocations; the
// current stream's lookup; kda::run (validation and the backend: the launch on CUDA).
enum Phase : int { inputs = 0, outputs, stream, run, count };

extern std::atomic<bool> enabled;

// Adds one call's phase times (nanoseconds) to the totals.
void add(const int64_t (&ns)[count]);

// The clock of one op call: started at construction, lap(p) ends phase p (and starts the next),
// and the destructor records the call. Reads the clock only while the probe is on.
class Laps {
 public:
  Laps() : on_(enabled.load(std::memory_order_relaxed)) {
    if (on_) last_ = Clock::now();
  }
  Laps(const Laps&) = delete;
  Laps& operator=(const Laps&) = delete;
  ~Laps() {
    if (on_) add(ns_);
  }
  void lap(Phase phase) {
    if (!on_) return;
    const Clock::time_point now = Clock::now();
    ns_[phase] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool on_;
  Clock::time_point last_{};
  int64_t ns_[count] = {};
};

}  // namespace kda::torch_op::probe

extern "C" {
// Switches the probe on (enable != 0) or off, copies the totals so far (nanoseconds per phase,
// in Phase's order; at most `n` of them) to `ns_out` when it is not null, resets them, and
// returns the number of op calls they cover. Exported by name, for bench/host_cost.py.
__attribute__((visibility("default"))) int64_t kda_torch_probe(int enable, int64_t* ns_out, int n);
}
