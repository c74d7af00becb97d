// Network-level Jacobians (analysis/operators/network.h) against LibTorch autograd on the same weights
// (docs/design.md §8, ≤ test::kVsAutograd relative Frobenius in fp64). What is checked here and nowhere
// else against autograd: the parameter tangents and gradients of the block kernels
// (analysis/operators/block_kernels.h, through ParamJacobianOp, both modes) and the chaining of
// block_jvp / block_vjp over L ≥ 2 layers (StackInputJacobianOp, both modes). One block's input
// Jacobian is the SAB/FFN kernel composition checked in test_autograd.cpp; the column blocks J_ℓ,
// Ĵ_ℓ of a selection are checked against the full J in tests/analysis/operators/test_network.cpp.
//
// The oracle stacks the independent torch-ops block of models/vit/torch_block.h (torch_sab,
// torch_ffn) on timm tensors written by models::block_to_timm, with the trainable tensors
// (attn.qkv.*, attn.proj.*, mlp.fc1.*, mlp.fc2.*) marked requires_grad, and differentiates each
// output entry of F (Eq. 5) by torch::autograd::grad. The gradients are placed into the θ layout
// documented in analysis/operators/network.h by code written here from that documentation (not by the
// library's pack_group), so a layout error shows up as a mismatch:
//   attention group: W^Q(r,c) = qkv.weight[c][r], W^K(r,c) = qkv.weight[d+c][r],
//                    W^V(r,c) = qkv.weight[2d+c][r], W^O(r,c) = proj.weight[c][r],
//                    b_Q | b_K | b_V = qkv.bias, b_O = proj.bias
//   MLP group:       W_1(r,c) = fc1.weight[c][r], b_1 = fc1.bias, W_2(r,c) = fc2.weight[c][r], b_2 = fc2.bias
#include <gtest/gtest.h>

#include <algorithm>
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "analysis/operators/network.h"
#include "models/track/bridge.h"
#include "models/io/tensor_map.h"
#include "models/vit/torch_block.h"
#include "support/random_block.h"
#include "support/tolerances.h"

namespace jacond {
namespace {

using models::TensorMap;
using test::kVsAutograd;
using test::rel_error;

struct Case {
  Index L;
  SkipMode skip;
};

constexpr uint64_t kWeightSeed = 555, kTokenSeed = 42;  // block l: kWeightSeed + 31 l; sample s: kTokenSeed + 3 s

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string skip = to_string(info.param.skip);
  std::replace(skip.begin(), skip.end(), '-', '_');  // test names take letters, digits and '_' only
  return "L" + std::to_string(info.param.L) + "_m2_n3_d4_h2_skip_" + skip;
}

constexpr Index kM = 2, kN = 3, kD = 4, kHeads = 2, kHidden = 8;

std::string key(Index l, const std::string& name) { return "blocks." + std::to_string(l) + "." + name; }

const char* const kTrainable[] = {"attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
                                  "mlp.fc1.weight",  "mlp.fc1.bias",  "mlp.fc2.weight",   "mlp.fc2.bias"};

torch::Tensor to_tensor(const Mat& X) {
  torch::Tensor t = torch::empty({X.rows(), X.cols()}, torch::kFloat64);
  auto a = t.accessor<double, 2>();
  for (Index i = 0; i < X.rows(); ++i)
    for (Index j = 0; j < X.cols(); ++j) a[i][j] = X(i, j);
  return t;
}

double at2(const torch::Tensor& t, Index i, Index j) { return t.accessor<double, 2>()[i][j]; }
double at1(const torch::Tensor& t, Index i) { return t.accessor<double, 1>()[i]; }

// Writes the gradient tensors of block l into row `row` of J (θ layout of analysis/operators/network.h).
void place_gradients(const std::vector<torch::Tensor>& g, Index d, Index hidden, Index col0, Index row, Mat& J) {
  const torch::Tensor qkv_w = g[0], qkv_b = g[1], proj_w = g[2], proj_b = g[3];
  const torch::Tensor fc1_w = g[4], fc1_b = g[5], fc2_w = g[6], fc2_b = g[7];
  Index c = col0;
  for (Index m = 0; m < 3; ++m)  // W^Q, W^K, W^V, each d×d column-major
    for (Index cc = 0; cc < d; ++cc)
      for (Index r = 0; r < d; ++r) J(row, c++) = at2(qkv_w, m * d + cc, r);
  for (Index cc = 0; cc < d; ++cc)
    for (Index r = 0; r < d; ++r) J(row, c++) = at2(proj_w, cc, r);
  for (Index i = 0; i < 3 * d; ++i) J(row, c++) = at1(qkv_b, i);
  for (Index i = 0; i < d; ++i) J(row, c++) = at1(proj_b, i);
  for (Index cc = 0; cc < hidden; ++cc)  // W_1 d×hidden
    for (Index r = 0; r < d; ++r) J(row, c++) = at2(fc1_w, cc, r);
  for (Index i = 0; i < hidden; ++i) J(row, c++) = at1(fc1_b, i);
  for (Index cc = 0; cc < d; ++cc)  // W_2 hidden×d
    for (Index r = 0; r < hidden; ++r) J(row, c++) = at2(fc2_w, cc, r);
  for (Index i = 0; i < d; ++i) J(row, c++) = at1(fc2_b, i);
}

class NetworkAutogradTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    for (Index l = 0; l < c.L; ++l) {
      net.blocks.push_back(test::random_block(kD, kHeads, kHidden, kWeightSeed + 31 * l));
      net.skips.push_back(c.skip);
      models::block_to_timm(net.blocks[l], l, tensors);
    }
    for (Index s = 0; s < kM; ++s) X.push_back(test::random_tokens(kN, kD, kTokenSeed + 3 * s));
  }

  torch::Tensor torch_stack(const torch::Tensor& X0) const {
    torch::Tensor Xt = X0;
    for (Index l = 0; l < net.depth(); ++l) {
      models::TorchBlockSpec spec;
      spec.layer = l;
      spec.heads = kHeads;
      spec.ln_eps = net.blocks[l].ln_eps;
      Xt = models::torch_sab(tensors, spec, Xt, sab_residual(net.skips[l]));
      Xt = models::torch_ffn(tensors, spec, Xt, ffn_residual(net.skips[l]));
    }
    return Xt;
  }

  // ∂F/∂θ (all groups) by autograd, one grad call per output entry.
  Mat autograd_param_jacobian() {
    torch::AutoGradMode on(true);
    std::vector<torch::Tensor> params;
    for (Index l = 0; l < net.depth(); ++l)
      for (const char* name : kTrainable) {
        tensors[key(l, name)] = tensors[key(l, name)].detach().clone().set_requires_grad(true);
        params.push_back(tensors[key(l, name)]);
      }
    const Index nd = kN * kD, p = ParamSelection::all(net).size(net);
    Mat J = Mat::Zero(kM * nd, p);
    for (Index s = 0; s < kM; ++s) {
      const torch::Tensor out = torch_stack(to_tensor(X[s]));
      for (Index a = 0; a < kD; ++a)
        for (Index i = 0; i < kN; ++i) {
          torch::Tensor seed = torch::zeros_like(out);
          seed.index_put_({i, a}, 1.0);
          auto g = torch::autograd::grad({out}, params, {seed}, /*retain_graph=*/true, /*create_graph=*/false,
                                         /*allow_unused=*/true);
          for (size_t k = 0; k < g.size(); ++k)
            if (!g[k].defined()) g[k] = torch::zeros_like(params[k]);  // does not reach this output
          Index col0 = 0;
          for (Index l = 0; l < net.depth(); ++l) {
            const std::vector<torch::Tensor> gl(g.begin() + 8 * l, g.begin() + 8 * (l + 1));
            place_gradients(gl, kD, kHidden, col0, s * nd + i + a * kN, J);
            col0 += attention_param_count(net.blocks[l]) + mlp_param_count(net.blocks[l]);
          }
        }
    }
    for (Index l = 0; l < net.depth(); ++l)
      for (const char* name : kTrainable) tensors[key(l, name)] = tensors[key(l, name)].detach();
    return J;
  }

  std::string knobs() const {
    std::ostringstream os;
    os << "L=" << net.depth() << " m=" << kM << " n=" << kN << " d=" << kD << " heads=" << kHeads
       << " hidden=" << kHidden << " skip=" << to_string(GetParam().skip) << " (non-zero biases) seeds "
       << kWeightSeed << " (+31 per layer, weights), " << kTokenSeed << " (+3 per sample, tokens)";
    return os.str();
  }

  Network net;
  TensorMap tensors;
  std::vector<Mat> X;
};

TEST_P(NetworkAutogradTest, ParameterJacobianMatchesAutogradInBothModes) {
  const NetworkForward fwd = network_forward(net, X);
  const Mat Jt = autograd_param_jacobian();
  const ParamJacobianOp all(net, fwd, ParamSelection::all(net));
  EXPECT_LT(rel_error(dense_from_products(all), Jt), kVsAutograd) << knobs() << " J by forward mode";
  EXPECT_LT(rel_error(dense_from_transpose_products(all), Jt), kVsAutograd) << knobs() << " J by reverse mode";
}

INSTANTIATE_TEST_SUITE_P(Stacks, NetworkAutogradTest,
                         testing::Values(Case{1, SkipMode::kNone}, Case{1, SkipMode::kFull}, Case{1, SkipMode::kSab},
                                         Case{1, SkipMode::kFfn}, Case{2, SkipMode::kNone}, Case{2, SkipMode::kFull},
                                         Case{2, SkipMode::kSab}, Case{2, SkipMode::kFfn}, Case{3, SkipMode::kNone},
                                         Case{3, SkipMode::kFull}, Case{3, SkipMode::kSab}, Case{3, SkipMode::kFfn}),
                         case_name);

// Stacks of L ≥ 2 blocks: the input Jacobian chains block_jvp (and block_vjp, in reverse order).
class StackAutogradTest : public NetworkAutogradTest {};

TEST_P(StackAutogradTest, InputJacobianOfTheStackMatchesAutogradInBothModes) {
  const NetworkForward fwd = network_forward(net, X);
  for (Index s = 0; s < kM; ++s) {
    const Mat Kt = models::torch_jacobian([&](const torch::Tensor& t) { return torch_stack(t); }, X[s]);
    const StackInputJacobianOp op(net, fwd, s);
    EXPECT_LT(rel_error(dense_from_products(op), Kt), kVsAutograd) << knobs() << " sample " << s << " forward mode";
    EXPECT_LT(rel_error(dense_from_transpose_products(op), Kt), kVsAutograd) << knobs() << " sample " << s << " reverse mode";
    EXPECT_LT(rel_error(stack_input_jacobian_dense(layer_factors(net, fwd, s)), Kt), kVsAutograd)
        << knobs() << " sample " << s << " (product of dense Eq. 8/9 factors)";
  }
}

INSTANTIATE_TEST_SUITE_P(Stacks, StackAutogradTest,
                         testing::Values(Case{2, SkipMode::kNone}, Case{2, SkipMode::kFull}, Case{2, SkipMode::kSab},
                                         Case{2, SkipMode::kFfn}, Case{3, SkipMode::kNone}, Case{3, SkipMode::kFull},
                                         Case{3, SkipMode::kSab}, Case{3, SkipMode::kFfn}),
                         case_name);

// Negative control: the same comparison rejects a network whose layer 1 uses the wrong skip mode,
// after accepting the right one (else a broken comparison would pass it).
TEST(NetworkAutogradNegative, WrongSkipModeIsRejected) {
  Network net;
  TensorMap tensors;
  for (Index l = 0; l < 2; ++l) {
    net.blocks.push_back(test::random_block(kD, kHeads, kHidden, kWeightSeed + 31 * l));
    net.skips.push_back(SkipMode::kFull);
    models::block_to_timm(net.blocks[l], l, tensors);
  }
  SCOPED_TRACE("seeds 555 (+31 per layer, weights), 42 (tokens)");
  const Mat X = test::random_tokens(kN, kD, kTokenSeed);
  const Mat Kt = models::torch_jacobian(
      [&](const torch::Tensor& t) {
        torch::Tensor Xt = t;
        for (Index l = 0; l < 2; ++l) {
          models::TorchBlockSpec spec;
          spec.layer = l;
          spec.heads = kHeads;
          Xt = models::torch_ffn(tensors, spec, models::torch_sab(tensors, spec, Xt, true), true);
        }
        return Xt;
      },
      X);
  ASSERT_LT(rel_error(dense_from_products(StackInputJacobianOp(net, network_forward(net, {X}), 0)), Kt), kVsAutograd)
      << "control: the right skip modes pass";
  net.skips[1] = SkipMode::kSab;
  const NetworkForward fwd = network_forward(net, {X});
  EXPECT_GT(rel_error(dense_from_products(StackInputJacobianOp(net, fwd, 0)), Kt), 1e-3);
}

}  // namespace
}  // namespace jacond
