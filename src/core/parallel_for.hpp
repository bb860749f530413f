#pragma once
// Runs independent work units on plain std::threads: each thread takes the next unit from one
// shared atomic counter, so uneven units (short tail chunks) balance themselves.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kda::cpu {

// The processors the system has online, read once: std::thread::hardware_concurrency() reads
// /sys/devices/system/cpu/online on every call (glibc's get_nprocs), which cost ~5 µs of each
// call of a small problem on the cpu backend (perf; dev/journal/performance.md, v-host.3).
inline int64_t hardware_threads() {
  static const int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return threads;
}

// Calls body(unit, scratch) for every unit in [0, count). Each thread owns one default-constructed
// Scratch (its reusable buffers) for all the units it takes. The calling thread works too, so a
// thread that cannot be started only means fewer workers. The first exception thrown by a body is
// rethrown here after every thread has stopped.
template <typename Scratch, typename Body>
void parallel_for_units(int64_t count, const Body& body) {
  if (count <= 0) return;
  const int64_t num_threads = std::min(hardware_threads(), count);

  std::atomic<int64_t> next_unit{0};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto worker = [&] {
    try {
      Scratch scratch;
      for (int64_t unit = next_unit++; unit < count; unit = next_unit++) body(unit, scratch);
    } catch (...) {
      next_unit = count;  // the others stop after their current unit
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
    }
  };

  std::vector<std::thread> helpers;
  try {
    helpers.reserve(static_cast<size_t>(num_threads - 1));
    for (int64_t i = 1; i < num_threads; ++i) helpers.emplace_back(worker);
  } catch (...) {
    // Could not start a thread: the ones started (and this one) still finish every unit.
  }
  worker();
  for (std::thread& t : helpers) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

// Calls body(chunk, hv, scratch) for every (chunk, value head) unit of an operator, in parallel
// as parallel_for_units does. Unit u is (chunks[u / HV], u % HV): the heads of one chunk run next
// to each other, so GVA heads sharing q and k read them while they are still in cache. Each unit
// writes only its own rows of its own head, so the results do not depend on the threads.
template <typename Scratch, typename Chunk, typename Body>
void parallel_for_chunk_heads(const std::vector<Chunk>& chunks, int64_t HV, const Body& body) {
  const int64_t units = static_cast<int64_t>(chunks.size()) * HV;
  parallel_for_units<Scratch>(units, [&](int64_t unit, Scratch& scratch) {
    body(chunks[static_cast<size_t>(unit / HV)], unit % HV, scratch);
  });
}

// The Scratch of a body that keeps no buffers between units.
struct NoScratch {};

}  // namespace kda::cpu
