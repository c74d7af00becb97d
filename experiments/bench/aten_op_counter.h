// Counting ATen operations by name while a scope runs: on a GPU each is a kernel launch or a few,
// and a small model's training step is bound by launches, so the count is what `jacond bench
// train` compares between its C++ and Python routes (torch_train_route.py, count_ops: torch.profiler
// records the same RecordFunction scopes), and what the model's tests pin (tests/models/test_vit.cpp).
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace jacond::cli {

/// ATen operations ("aten::" names) by name, nested ones included, counted through a global
/// RecordFunction callback (every thread: on a GPU, backward runs on the device's own thread)
/// while one is alive; take() hands over the counts so far and starts again.
class AtenOpCounter {
 public:
  using Counts = std::map<std::string, int64_t>;
  AtenOpCounter() {
    std::lock_guard<std::mutex> lock(mutex());
    counts().clear();
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&enter).scopes({at::RecordScope::FUNCTION}));
  }
  ~AtenOpCounter() { at::removeCallback(handle_); }
  AtenOpCounter(const AtenOpCounter&) = delete;
  AtenOpCounter& operator=(const AtenOpCounter&) = delete;
  Counts take() {
    std::lock_guard<std::mutex> lock(mutex());
    Counts out;
    out.swap(counts());
    return out;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static Counts& counts() {
    static Counts c;
    return c;
  }
  static std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& f) {
    const std::string name = f.name();  // only ATen's, as the Python route keeps (autograd's nodes also record here)
    if (name.rfind("aten::", 0) != 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex());
    ++counts()[name];
    return nullptr;
  }
  at::CallbackHandle handle_;
};

/// The number of operations in `c`.
inline int64_t total(const AtenOpCounter::Counts& c) {
  int64_t n = 0;
  for (const auto& [name, k] : c) n += k;
  return n;
}

}  // namespace jacond::cli
