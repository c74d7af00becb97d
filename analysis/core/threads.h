// Explicit thread control: OpenBLAS (which also runs Eigen's large products, EIGEN_USE_BLAS)
// and Eigen's own parallel loops. Call once at start-up; the CLI's --threads lands here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace jacond {
void set_threads(int n);
int get_threads();

/// Runs body(k) for k = 0 … count−1 on get_threads() threads, each thread one contiguous range
/// of k (so a body that writes only its own k's memory needs no synchronisation, and its result
/// does not depend on the thread count). The first exception a body throws is rethrown here.
template <typename Body>
void parallel_for(std::int64_t count, const Body& body) {
  const std::int64_t workers = std::min<std::int64_t>(std::max(1, get_threads()), count);
  if (workers <= 1) {
    for (std::int64_t k = 0; k < count; ++k) body(k);
    return;
  }
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> pool;
  for (std::int64_t t = 0; t < workers; ++t)
    pool.emplace_back([&, t] {
      try {
        for (std::int64_t k = count * t / workers; k < count * (t + 1) / workers; ++k) body(k);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}
}  // namespace jacond
