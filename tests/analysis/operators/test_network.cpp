// Network-level Jacobians (analysis/operators/network.h) against central finite differences of
// F(θ) (Eq. 5) and of f(X), the adjoint identity ⟨u, Jv⟩ = ⟨Jᵀu, v⟩, the block-column structure
// J = [J_0, Ĵ_0, J_1, Ĵ_1, …] (§4.2), the dense per-layer products of Eq. 8/9, and the
// documented parameter layout. Links only libjacond_analysis.
#include <gtest/gtest.h>

#include <algorithm>

#include <random>
#include <sstream>
#include <string>

#include "analysis/operators/network.h"
#include "support/error_message.h"
#include "support/random_block.h"
#include "support/tolerances.h"

namespace jacond {
namespace {

using test::rel_error;

struct Case {
  Index L, m, n, d, heads;
  SkipMode skip;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string skip = to_string(c.skip);
  std::replace(skip.begin(), skip.end(), '-', '_');  // test names take letters, digits and '_' only
  return "L" + std::to_string(c.L) + "_m" + std::to_string(c.m) + "_n" + std::to_string(c.n) + "_d" +
         std::to_string(c.d) + "_h" + std::to_string(c.heads) + "_skip_" + skip;
}

Network random_network(Index L, Index d, Index heads, Index hidden, SkipMode skip, uint64_t seed) {
  Network net;
  for (Index l = 0; l < L; ++l) {
    net.blocks.push_back(test::random_block(d, heads, hidden, seed + 101 * l));
    net.skips.push_back(skip);
  }
  return net;
}

std::vector<Mat> random_inputs(Index m, Index n, Index d, uint64_t seed) {
  std::vector<Mat> X;
  for (Index s = 0; s < m; ++s) X.push_back(test::random_tokens(n, d, seed + 7 * s));
  return X;
}

// Central differences of F(θ) along every coordinate of θ (all groups, header order).
Mat fd_param_jacobian(const Network& net, const std::vector<Mat>& X) {
  const Vec theta = network_parameters(net);
  const double h = test::kFdStep;
  Mat J(network_outputs(net, X).size(), theta.size());
  for (Index j = 0; j < theta.size(); ++j) {
    Vec tp = theta, tm = theta;
    tp(j) += h;
    tm(j) -= h;
    J.col(j) = (network_outputs(with_parameters(net, tp), X) - network_outputs(with_parameters(net, tm), X)) / (2 * h);
  }
  return J;
}

// Central differences of vec f(X) of one sample through the stack.
Mat fd_input_jacobian(const Network& net, const Mat& X) {
  const double h = test::kFdStep;
  const Index N = X.size();
  Mat K(N, N);
  for (Index j = 0; j < N; ++j) {
    Mat Xp = X, Xm = X;
    Xp.data()[j] += h;
    Xm.data()[j] -= h;
    K.col(j) = (network_outputs(net, {Xp}) - network_outputs(net, {Xm})) / (2 * h);
  }
  return K;
}

class NetworkTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    net = random_network(c.L, c.d, c.heads, 2 * c.d, c.skip, weight_seed());
    X = random_inputs(c.m, c.n, c.d, token_seed());
    fwd = network_forward(net, X);
  }
  uint64_t weight_seed() const { return 1000 + GetParam().L * 13 + GetParam().d; }
  uint64_t token_seed() const { return 77 + GetParam().n; }
  std::string knobs() const {
    const Case& c = GetParam();
    std::ostringstream os;
    os << "L=" << c.L << " m=" << c.m << " n=" << c.n << " d=" << c.d << " heads=" << c.heads << " skip=" << to_string(c.skip)
       << " seeds " << weight_seed() << " (+101 per layer, weights), " << token_seed() << " (+7 per sample, tokens)";
    return os.str();
  }
  Network net;
  std::vector<Mat> X;
  NetworkForward fwd;
};

TEST_P(NetworkTest, FullJacobianMatchesCentralDifferences) {
  const Mat J = dense_from_products(ParamJacobianOp(net, fwd, ParamSelection::all(net)));
  const Mat Jfd = fd_param_jacobian(net, X);
  ASSERT_EQ(J.rows(), Jfd.rows());
  ASSERT_EQ(J.cols(), Jfd.cols());
  EXPECT_LT(rel_error(J, Jfd), test::kVsFiniteDifferences) << knobs();
}

TEST_P(NetworkTest, ForwardAndReverseModeAgree) {
  for (const ParamSelection& sel : {ParamSelection::all(net), ParamSelection::attention(0), ParamSelection::mlp(net.depth() - 1)}) {
    const ParamJacobianOp op(net, fwd, sel);
    const Mat Jf = dense_from_products(op), Jr = dense_from_transpose_products(op);
    EXPECT_LT(rel_error(Jr, Jf), test::kSameMathRounding) << knobs() << " selection of " << sel.slices.size() << " groups";
  }
}

TEST_P(NetworkTest, AdjointIdentityOnRandomVectors) {
  const ParamJacobianOp op(net, fwd, ParamSelection::all(net));
  SCOPED_TRACE("vector seed=5");
  std::mt19937_64 rng(5);
  std::normal_distribution<double> N(0.0, 1.0);
  for (int t = 0; t < 3; ++t) {
    Vec v(op.cols()), u(op.rows()), Jv(op.rows()), Jtu(op.cols());
    for (Index i = 0; i < v.size(); ++i) v(i) = N(rng);
    for (Index i = 0; i < u.size(); ++i) u(i) = N(rng);
    op.perform_op(v.data(), Jv.data());
    op.perform_op_transpose(u.data(), Jtu.data());
    const double lhs = u.dot(Jv), rhs = Jtu.dot(v);
    EXPECT_NEAR(lhs, rhs, 1e-12 * (u.norm() * Jv.norm() + Jtu.norm() * v.norm())) << knobs();
  }
}

TEST_P(NetworkTest, BlockColumnsAreTheSubJacobians) {
  // J = [J_0, Ĵ_0, J_1, Ĵ_1, …]: each sub-operator equals its column block of J.
  const Mat J = param_jacobian_dense(net, fwd, ParamSelection::all(net));
  const std::vector<Index> off = ParamSelection::all(net).offsets(net);
  for (Index l = 0; l < net.depth(); ++l) {
    const Mat Jl = param_jacobian_dense(net, fwd, ParamSelection::attention(l));
    const Mat Jhat = param_jacobian_dense(net, fwd, ParamSelection::mlp(l));
    ASSERT_EQ(Jl.cols(), attention_param_count(net.blocks[l]));
    ASSERT_EQ(Jhat.cols(), mlp_param_count(net.blocks[l]));
    EXPECT_LT(rel_error(Jl, J.middleCols(off[2 * l], Jl.cols())), test::kSameMathRounding) << knobs() << " J_" << l;
    EXPECT_LT(rel_error(Jhat, J.middleCols(off[2 * l + 1], Jhat.cols())), test::kSameMathRounding) << knobs() << " Jhat_" << l;
  }
}

TEST_P(NetworkTest, InputJacobianMatchesDifferencesAndLayerProducts) {
  const StackInputJacobianOp op(net, fwd, 0);
  const Mat K = dense_from_products(op);
  const Mat Kt = dense_from_transpose_products(op);
  const Mat Kfd = fd_input_jacobian(net, X[0]);
  const Mat Kprod = stack_input_jacobian_dense(layer_factors(net, fwd, 0));  // Eq. 8/9 from the closed forms
  EXPECT_LT(rel_error(K, Kfd), test::kVsFiniteDifferences) << knobs();
  EXPECT_LT(rel_error(Kt, K), test::kSameMathRounding) << knobs();
  EXPECT_LT(rel_error(Kprod, K), 1e-11) << knobs();
}

INSTANTIATE_TEST_SUITE_P(Sizes, NetworkTest,
                         testing::Values(Case{1, 2, 4, 6, 2, SkipMode::kFull}, Case{2, 2, 4, 6, 2, SkipMode::kNone},
                                         Case{2, 2, 3, 4, 1, SkipMode::kSab}, Case{2, 1, 3, 4, 2, SkipMode::kFfn},
                                         Case{3, 2, 3, 4, 2, SkipMode::kFull}),
                         case_name);

TEST(NetworkLayout, ParameterOffsetsFollowTheHeaderComment) {
  SCOPED_TRACE("seed=3");
  const Index d = 4, hidden = 6;
  Network net = random_network(2, d, 2, hidden, SkipMode::kFull, 3);
  const Vec theta = network_parameters(net);
  ASSERT_EQ(theta.size(), 2 * ((4 * d * d + 4 * d) + (2 * d * hidden + hidden + d)));
  // Block 0 attention: vec W^Q (column-major) first, then W^K, W^V, W^O, b_Q, b_K, b_V, b_O.
  EXPECT_EQ(theta(1 + 2 * d), net.blocks[0].Wq(1, 2));
  EXPECT_EQ(theta(d * d + 3), net.blocks[0].Wk(3, 0));
  EXPECT_EQ(theta(3 * d * d + 2 + 3 * d), net.blocks[0].Wo(2, 3));
  EXPECT_EQ(theta(4 * d * d + d + 1), net.blocks[0].bk(1));
  EXPECT_EQ(theta(4 * d * d + 3 * d + 2), net.blocks[0].bo(2));
  // Block 0 MLP: vec W_1 (d×hidden), b_1, vec W_2 (hidden×d), b_2.
  const Index m0 = 4 * d * d + 4 * d;
  EXPECT_EQ(theta(m0 + 3 + 5 * d), net.blocks[0].W1(3, 5));
  EXPECT_EQ(theta(m0 + d * hidden + 4), net.blocks[0].b1(4));
  EXPECT_EQ(theta(m0 + d * hidden + hidden + 5 + 1 * hidden), net.blocks[0].W2(5, 1));
  // Block 1 starts after both groups of block 0.
  const Index b1 = m0 + 2 * d * hidden + hidden + d;
  EXPECT_EQ(theta(b1), net.blocks[1].Wq(0, 0));
  // Round trip.
  Vec t2 = theta;
  t2(b1) += 1.0;
  const Network net2 = with_parameters(net, t2);
  EXPECT_EQ(net2.blocks[1].Wq(0, 0), net.blocks[1].Wq(0, 0) + 1.0);
  EXPECT_EQ(network_parameters(net2), t2);
}

TEST(NetworkNegativeControl, WrongSkipModeIsDetected) {
  // The analytic J of a skipless network must NOT match differences of the residual network:
  // the comparison above can fail.
  SCOPED_TRACE("seeds 9 (weights), 1 (tokens)");
  Network full = random_network(2, 4, 2, 8, SkipMode::kFull, 9);
  Network none = full;
  none.skips.assign(2, SkipMode::kNone);
  const std::vector<Mat> X = random_inputs(1, 3, 4, 1);
  const NetworkForward f_none = network_forward(none, X);
  const Mat J_none = param_jacobian_dense(none, f_none, ParamSelection::all(none));
  EXPECT_GT(rel_error(J_none, fd_param_jacobian(full, X)), 1e-2);
}

TEST(NetworkErrors, BadInputsThrowNamingTheProblem) {
  Network net = random_network(2, 4, 2, 8, SkipMode::kFull, 2);
  const std::vector<Mat> X = random_inputs(2, 3, 4, 1);
  const NetworkForward fwd = network_forward(net, X);
  EXPECT_THROW(ParamJacobianOp(net, fwd, ParamSelection::attention(2)), std::invalid_argument);
  EXPECT_EQ(test::error_message([&] { ParamJacobianOp(net, fwd, ParamSelection::attention(2)); }),
            "parameter layer 2 out of range [0, 2)");
  Network bad = net;
  bad.skips.pop_back();
  EXPECT_THROW(network_forward(bad, X), std::invalid_argument);
  EXPECT_EQ(test::error_message([&] { network_forward(bad, X); }), "network has 2 blocks but 1 skip modes");
  Network bad_d = net;
  bad_d.blocks[1] = test::random_block(6, 2, 8, 1);
  EXPECT_THROW(network_forward(bad_d, X), std::invalid_argument);
  EXPECT_EQ(test::error_message([&] { network_forward(bad_d, X); }), "block 1 has d=6 but block 0 has d=4");
  EXPECT_THROW(network_forward(net, {test::random_tokens(3, 5, 1)}), std::invalid_argument);
  const std::string width = test::error_message([&] { network_forward(net, {test::random_tokens(3, 5, 1)}); });
  EXPECT_NE(width.find('5'), std::string::npos) << width;  // the token width given
  EXPECT_NE(width.find('4'), std::string::npos) << width;  // and the d expected
  EXPECT_THROW(with_parameters(net, Vec::Zero(3)), std::invalid_argument);
  const Index count = 2 * (attention_param_count(net.blocks[0]) + mlp_param_count(net.blocks[0]));
  EXPECT_EQ(test::error_message([&] { with_parameters(net, Vec::Zero(3)); }),
            "parameter vector has 3 entries, the network has " + std::to_string(count));
}

}  // namespace
}  // namespace jacond
