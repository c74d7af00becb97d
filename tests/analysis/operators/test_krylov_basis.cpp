// The host's KrylovBasis against the contract every basis meets (tests/support/krylov_basis_contract.h),
// and the space it makes for an operator.
#include <gtest/gtest.h>

#include "analysis/operators/krylov_basis.h"
#include "analysis/operators/operators.h"
#include "support/krylov_basis_contract.h"

namespace jacond {
namespace {

TEST(HostKrylovBasis, MeetsTheContract) {
  const Mat A = test::random_matrix(30, 20, 1);
  const DenseMatrixOp dense(A);
  const OperatorRef op = make_operator_ref(dense);
  test::check_krylov_basis_contract(host_krylov_space(op), A, 1e-13);
}

TEST(HostKrylovBasis, SpaceHasTheOperatorsShape) {
  OperatorRef op;
  op.rows = 7;
  op.cols = 5;
  op.apply = [](const double*, double*) {};
  op.apply_transpose = [](const double*, double*) {};
  const KrylovSpace space = host_krylov_space(op);
  EXPECT_EQ(space.rows, 7);
  EXPECT_EQ(space.cols, 5);
  EXPECT_NE(space.make_basis(3), nullptr);
}

}  // namespace
}  // namespace jacond
