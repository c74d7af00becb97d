#include "analysis/core/clock.h"
#include "analysis/spectral/dense_device.h"

#include <chrono>
#include <utility>

#include "analysis/core/threads.h"

namespace jacond {

std::string DenseDevice::svd_method() const { return name() == "cpu" ? "dense-svd" : "dense-svd-" + name(); }

ConditionReport DenseDevice::condition_svd(Mat A, const std::string& matrix) const {
  const auto t0 = std::chrono::steady_clock::now();
  const Index rows = A.rows(), cols = A.cols();
  ConditionReport r = report_from_singular_values(matrix, rows, cols, singular_values(std::move(A)), svd_method());
  r.seconds = seconds_since(t0);
  return r;
}

std::string CpuDenseDevice::description() const {
  return "cpu (LAPACKE/OpenBLAS, " + std::to_string(get_threads()) + " threads)";
}

ConditionReport CpuDenseDevice::condition_fast(Mat A, const std::string& matrix) const {
  return jacond::condition_fast(std::move(A), matrix);
}

std::optional<ConditionReport> CpuDenseDevice::condition_schur(const TokenMap& map, const SchurPlan& plan,
                                                               const std::string& matrix,
                                                               const std::function<void()>& checkpoint) const {
  if (map.assembles_into() != "cpu") return std::nullopt;
  return jacond::condition_schur(map, plan, matrix, checkpoint);
}

Vec CpuDenseDevice::singular_values(Mat A) const { return jacond::singular_values(std::move(A)); }

ConditionReport CpuDenseDevice::condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) const {
  return jacond::condition_mixed(std::move(A32), A, matrix);
}

bool CpuDenseDevice::fits(DenseRoute route, Index rows, Index cols, const DenseBudget& budget) const {
  const int threads = get_threads();
  switch (route) {
    case DenseRoute::kFast: return jacond::fits(fast_route_cost(rows, cols, threads), budget);
    case DenseRoute::kSvd: return jacond::fits(svd_route_cost(rows, cols, threads), budget);
    case DenseRoute::kInertia: {
      DenseCost three = inertia_count_cost(rows, cols, threads);
      three.seconds *= 3;  // bottom (1 %), bottom cluster (10 %), top
      return jacond::fits(three, budget);
    }
  }
  return false;
}

std::shared_ptr<const DenseDevice> cpu_dense_device() {
  static const std::shared_ptr<const DenseDevice> cpu = std::make_shared<CpuDenseDevice>();
  return cpu;
}

}  // namespace jacond
