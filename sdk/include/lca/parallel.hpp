// parallel_for for host-side loops (the CPU reference's passes, the check's conversions and
// comparisons): std::threads take work items from a shared counter, so uneven items (causal rows)
// balance themselves; each item runs on exactly one thread.
// Rule: body(item, thread) must write only what item owns, plus per-thread scratch[thread].
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace lca {

// Threads to use: `requested` when positive (a plugin's lca_exec::num_threads), else the hardware's count.
inline int resolve_threads(int32_t requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

template <class Body>
void parallel_for(int64_t items, int threads, Body&& body) {
  if (items <= 0) return;
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, items));
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&](int thread) {
    try {
      for (int64_t item = next.fetch_add(1); item < items; item = next.fetch_add(1)) body(item, thread);
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next.store(items);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace lca
