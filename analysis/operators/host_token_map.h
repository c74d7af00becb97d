// A host operator (operators.h) as a TokenMap whose assembly writes host memory, so a route
// written against TokenMap (the Schur route, analysis/spectral/schur_lu.h) runs on the host on
// the closed-form kernels' products (analysis/operators/block_kernels.h), as it runs on a GPU on
// LibTorch's.
//
// Column j of K is K e_j: assemble_columns makes one product per column (the products of a
// unit input are exact JVPs, so a column equals the closed-form Jacobian's to round-off) unless
// given a column source (AttentionJacobianColumns for K_sa, B_sa, E_sa: the closed form itself,
// an O(n·d·heads) column instead of a product); apply_columns makes one product per input column.
// Both write column-major with leading dimension rows(), as TokenMap's contract says. Guarded by
// HostTokenMap.* in tests/analysis/spectral/test_schur_host.cpp (columns = the closed-form
// matrix either way; the refusals).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "analysis/core/types.h"
#include "analysis/operators/operator_device.h"

namespace jacond {

template <typename Op>
class HostTokenMap final : public TokenMap {
 public:
  /// Writes columns [first, first + count) of K (rows() × count, leading dimension rows()).
  using ColumnSource = std::function<void(Index first, Index count, double* out)>;

  /// Holds a reference: keep `op` alive. Square token maps only (n_in = n_out), as TokenMap.
  /// Without `columns`, assembly is op's products of unit inputs.
  explicit HostTokenMap(const Op& op, ColumnSource columns = {}) : op_(op), columns_(std::move(columns)) {
    if (op.n_in() != op.n_out()) throw std::invalid_argument("HostTokenMap: the operator changes the token count");
  }
  Index n() const override { return op_.n_in(); }
  Index d_in() const override { return op_.d_in(); }
  Index d_out() const override { return op_.d_out(); }
  Mat apply(const Mat& dX) const override { return op_.apply(dX); }
  Mat apply_transpose(const Mat& G) const override { return op_.apply_transpose(G); }

  bool assemble(double* host_out) const override { return assemble_columns(0, op_.cols(), host_out); }

  bool assemble_columns(Index first, Index count, double* host_out) const override {
    const Index rows = op_.rows(), cols = op_.cols();
    if (first < 0 || count < 0 || first + count > cols)
      throw std::invalid_argument("HostTokenMap: columns [" + std::to_string(first) + ", " +
                                  std::to_string(first + count) + ") of a matrix with " + std::to_string(cols));
    if (columns_) {
      columns_(first, count, host_out);
    } else {
      Vec unit = Vec::Zero(cols);
      for (Index j = 0; j < count; ++j) {
        unit[first + j] = 1.0;
        op_.perform_op(unit.data(), host_out + j * rows);
        unit[first + j] = 0.0;
      }
    }
    if (!Eigen::Map<const Mat>(host_out, rows, count).allFinite())
      throw std::invalid_argument("HostTokenMap: an assembled column contains NaN or inf");
    return true;
  }

  bool apply_columns(const double* host_in, Index count, double* host_out) const override {
    const Index rows = op_.rows(), cols = op_.cols();
    for (Index j = 0; j < count; ++j) op_.perform_op(host_in + j * cols, host_out + j * rows);
    return true;
  }

  std::string assembles_into() const override { return "cpu"; }

 private:
  const Op& op_;
  ColumnSource columns_;
};

}  // namespace jacond
