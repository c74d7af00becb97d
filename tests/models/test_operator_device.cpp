// The block's matrix-free operators in ATen (models/device/torch_operator_device.h) against the
// host kernels (analysis/operators/block_kernels.h): on the CPU device in every build, on CUDA
// where there is a GPU (OperatorDeviceCuda.*, skipped otherwise); GKL's basis on the device
// (TorchKrylovBasis) against the contract of every KrylovBasis; and the lanczos route of
// block_reports through either device (products and basis there) against the dense exact κ.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include "analysis/core/scoped_env.h"
#include "analysis/core/threads.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "analysis/report/block_report.h"
#include "analysis/spectral/dense_device_module.h"
#include "analysis/spectral/schur_lu.h"
#include "models/device/torch_operator_device.h"
#include "models/train/trainer.h"
#include "support/csv.h"
#include "support/expect_gpu.h"
#include "support/krylov_basis_contract.h"
#include "support/random_block.h"
#include "support/tolerances.h"

namespace {

using namespace jacond;
namespace fs = std::filesystem;
using jacond::models::TorchOperatorDevice;

const char* const kMatrices[] = {"K_sa", "B_sa", "E_sa", "K_sab", "K_mlp", "K_ffn"};

// The host operator of `matrix` applied to dX (transpose: Kᵀ), for the comparison.
Mat host_apply(const BlockWeights& w, const BlockForward& f, const std::string& matrix, const Mat& dX, bool transpose) {
  const auto run = [&](const auto& op) { return transpose ? op.apply_transpose(dX) : op.apply(dX); };
  if (matrix == "K_sa") return run(AttentionJacobianOp(w, f.attn, AttentionPart::kFull));
  if (matrix == "B_sa") return run(AttentionJacobianOp(w, f.attn, AttentionPart::kB));
  if (matrix == "E_sa") return run(AttentionJacobianOp(w, f.attn, AttentionPart::kE));
  if (matrix == "K_sab") return run(SabJacobianOp(w, f));
  if (matrix == "K_mlp") return run(MlpJacobianOp(w, f.mlp));
  return run(FfnJacobianOp(w, f));
}

// Every operator, JVP and VJP, at n 9, d 12, 3 heads (d_h 4), biases, a logit scale of 0.7, in
// every skip mode: the device's product equals the host's to rounding, and ⟨K x, y⟩ = ⟨x, Kᵀ y⟩.
void expect_products_equal_the_host(const TorchOperatorDevice& device) {
  const Index n = 9, d = 12;
  const BlockWeights w = test::random_block(d, 3, 4 * d, 17, 0.7);
  const Mat X = test::random_tokens(n, d, 5);
  for (SkipMode skip : kSkipModes) {
    const BlockForward f = block_forward(w, X, skip);
    for (const std::string matrix : kMatrices) {
      const auto map = device.block_operator(w, f, matrix);
      ASSERT_EQ(map->n(), n);
      ASSERT_EQ(map->d_in(), d);
      ASSERT_EQ(map->d_out(), d);
      const Mat x = test::random_tokens(n, d, 11), y = test::random_tokens(n, d, 12);
      const Mat Kx = map->apply(x), Kty = map->apply_transpose(y);
      const std::string knobs = matrix + " skip " + to_string(skip) + " on " + device.name();
      EXPECT_LE(test::rel_error(Kx, host_apply(w, f, matrix, x, false)), test::kSameMathRounding) << knobs;
      EXPECT_LE(test::rel_error(Kty, host_apply(w, f, matrix, y, true)), test::kSameMathRounding) << knobs;
      const double lhs = (Kx.array() * y.array()).sum(), rhs = (x.array() * Kty.array()).sum();
      EXPECT_NEAR(lhs, rhs, test::kSameMathRounding * Kx.norm() * y.norm()) << knobs;
    }
  }
}

TEST(TorchOperatorDevice, CpuProductsEqualTheHostKernels_n9_d12_h3) {
  expect_products_equal_the_host(TorchOperatorDevice(torch::kCPU));
}

TEST(TorchOperatorDevice, NamesItsDeviceAndRefusesAMatrixWithoutAnOperator) {
  const TorchOperatorDevice device(torch::kCPU);
  EXPECT_EQ(device.name(), "torch-cpu");
  EXPECT_NE(device.description().find("cpu"), std::string::npos) << device.description();
  const BlockWeights w = test::random_block(8, 2, 16, 3);
  const BlockForward f = block_forward(w, test::random_tokens(5, 8, 3), SkipMode::kFull);
  try {
    device.block_operator(w, f, "softmax");
    FAIL() << "softmax has no matrix-free operator";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'softmax'"), std::string::npos) << e.what();
  }
}

// A LibTorch failure inside a product (here a tangent of the wrong width, which the GEMM refuses;
// on a GPU also out-of-memory or a CUDA error) is one line naming the product and the device, and
// a DeviceError: a failure that Lanczos inside a dense route lets through (lu_lanczos.h), where a
// plain std::runtime_error is read as "did not converge" (SchurRoute.ADeviceErrorInItsProducts…).
TEST(TorchOperatorDevice, AFailingProductIsOneLineNamingItAndTheDevice) {
  const TorchOperatorDevice device(torch::kCPU);
  const BlockWeights w = test::random_block(8, 2, 16, 3);
  const BlockForward f = block_forward(w, test::random_tokens(5, 8, 3), SkipMode::kFull);
  const auto map = device.block_operator(w, f, "K_sab");
  for (bool transpose : {false, true}) {
    try {
      const Mat wrong = Mat::Ones(5, 9);
      transpose ? map->apply_transpose(wrong) : map->apply(wrong);
      FAIL() << "a 5 x 9 tangent of a d = 8 block was accepted";
    } catch (const DeviceError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find(transpose ? "(VJP) on cpu" : "(JVP) on cpu"), std::string::npos) << msg;
    }
  }
}

// The LayerNorm-complement restriction on the device (C_i from two reflectors per token) against
// the host's LnComplementOp over the host kernels: K_sab and K_ffn, with and without their
// residual, JVP and VJP to rounding, and the adjoint identity on the n × (d − 2) input.
void expect_ln_complement_equals_the_host(const TorchOperatorDevice& device) {
  const Index n = 7, d = 12;
  const BlockWeights w = test::random_block(d, 3, 4 * d, 41, 0.7);
  const Mat X = test::random_tokens(n, d, 43);
  for (SkipMode skip : {SkipMode::kNone, SkipMode::kFull}) {
    const BlockForward f = block_forward(w, X, skip);
    for (const std::string matrix : {"K_sab", "K_ffn"}) {
      const std::string knobs = matrix + " skip " + to_string(skip) + " on " + device.name();
      const LayerNormComplement basis(matrix == "K_sab" ? f.ln1.x_hat : f.ln2.x_hat);
      const auto map = device.block_operator(w, f, matrix);
      const auto restricted = device.ln_complement(*map, basis);
      ASSERT_TRUE(restricted) << knobs;
      ASSERT_EQ(restricted->n(), n);
      ASSERT_EQ(restricted->d_in(), d - 2);
      ASSERT_EQ(restricted->d_out(), d);
      const Mat c = test::random_tokens(n, d - 2, 45), y = test::random_tokens(n, d, 46);
      const Mat Kc = restricted->apply(c), Kty = restricted->apply_transpose(y);
      const auto host = [&](const auto& op) {
        const LnComplementOp<std::decay_t<decltype(op)>> r(op, basis);
        EXPECT_LE(test::rel_error(Kc, r.apply(c)), test::kSameMathRounding) << knobs;
        EXPECT_LE(test::rel_error(Kty, r.apply_transpose(y)), test::kSameMathRounding) << knobs;
      };
      if (matrix == "K_sab") host(SabJacobianOp(w, f));
      else host(FfnJacobianOp(w, f));
      const double lhs = (Kc.array() * y.array()).sum(), rhs = (c.array() * Kty.array()).sum();
      EXPECT_NEAR(lhs, rhs, test::kSameMathRounding * Kc.norm() * y.norm()) << knobs;
    }
  }
}

TEST(TorchOperatorDevice, CpuLnComplementEqualsTheHosts_n7_d12_h3) {
  expect_ln_complement_equals_the_host(TorchOperatorDevice(torch::kCPU));
}

// The lanczos route of block_reports with the device's products, and its GKL basis there too
// (TorchKrylovBasis): the same rows and statuses as with the host's, method gkl-<device>, and
// every bracket contains the dense exact κ. Skipless, so the ln-complement rows (the device's
// restriction, n·d × n·(d − 2), with its basis on the device) are in it too.
void expect_lanczos_reports_bracket_the_exact_kappa(const std::shared_ptr<const OperatorDevice>& device) {
  const BlockWeights w = test::random_block(16, 2, 64, 23);
  const Mat X = test::random_tokens(8, 16, 29);
  BlockReportOptions exact_opt;
  exact_opt.matrices = {"B_sa", "K_sab", "K_mlp", "K_ffn"};  // not K_sa, E_sa: 10 000 products
  BlockReportOptions host_opt = exact_opt;
  host_opt.route = KappaRoute::kLanczos;
  BlockReportOptions device_opt = host_opt;
  device_opt.operator_device = device;
  const auto exact = block_reports(w, X, SkipMode::kNone, exact_opt);
  const auto host = block_reports(w, X, SkipMode::kNone, host_opt);
  const auto on_device = block_reports(w, X, SkipMode::kNone, device_opt);
  ASSERT_EQ(on_device.size(), host.size());
  ASSERT_EQ(on_device.size(), exact.size());
  int bracketed = 0;
  for (size_t i = 0; i < on_device.size(); ++i) {
    const ConditionReport& r = on_device[i];
    const std::string knobs = r.matrix + "/" + r.space;
    EXPECT_EQ(r.matrix, host[i].matrix);
    EXPECT_EQ(r.space, host[i].space) << knobs;
    EXPECT_EQ(r.method, host[i].method + "-" + device->name()) << knobs;
    EXPECT_EQ(r.status, host[i].status) << knobs;
    ASSERT_EQ(exact[i].matrix + exact[i].space, r.matrix + r.space);
    if (r.status != Status::kBracket) continue;
    ++bracketed;
    const double kappa = exact[i].kappa;
    EXPECT_LE(r.kappa_lo, kappa * (1 + 1e-10)) << knobs;
    EXPECT_GE(r.kappa_hi, kappa * (1 - 1e-10)) << knobs;
  }
  // B_sa, K_mlp and both ln-complement rows (the full-space K_sab and K_ffn are singular).
  EXPECT_GE(bracketed, 4);
}

TEST(TorchOperatorDevice, CpuLanczosReportsBracketTheExactKappa_n8_d16_h2) {
  expect_lanczos_reports_bracket_the_exact_kappa(std::make_shared<TorchOperatorDevice>(torch::kCPU));
}

// The device's Krylov basis at any scale (gkl.h, "Range"). K_mlp is linear in W_2: scaling W_2 by
// a power of two s scales K_mlp by s exactly and leaves κ alone. At s = 2^-660 (~2e-199) ATen's sum
// of squares underflows to 0 (a false breakdown: `singular`), at 2^660 it overflows (inf, a NaN
// bracket); with the rescaled norm every run is a bracket around the dense κ at s = 1.
void expect_lanczos_keeps_its_bracket_at_tiny_and_huge_scales(const std::shared_ptr<const OperatorDevice>& device) {
  const Mat X = test::random_tokens(8, 16, 29);
  BlockReportOptions exact_opt;
  exact_opt.matrices = {"K_mlp"};
  BlockReportOptions opt = exact_opt;
  opt.route = KappaRoute::kLanczos;
  opt.operator_device = device;
  BlockWeights w = test::random_block(16, 2, 64, 23);
  const auto exact = block_reports(w, X, SkipMode::kFull, exact_opt);
  ASSERT_EQ(exact.size(), 1u);
  const double kappa = exact[0].kappa;
  const Mat W2 = w.W2;
  for (const int power : {0, -660, 660}) {
    w.W2 = std::ldexp(1.0, power) * W2;
    const auto scaled = block_reports(w, X, SkipMode::kFull, opt);
    ASSERT_EQ(scaled.size(), 1u);
    EXPECT_EQ(scaled[0].status, Status::kBracket) << "2^" << power;
    EXPECT_LE(scaled[0].kappa_lo, kappa * (1 + 1e-10)) << "2^" << power;
    EXPECT_GE(scaled[0].kappa_hi, kappa * (1 - 1e-10)) << "2^" << power;
    EXPECT_LE(scaled[0].kappa_hi, 1.02 * scaled[0].kappa_lo) << "2^" << power;  // the default 1 % target, met
  }
}

TEST(TorchOperatorDevice, CpuLanczosKeepsItsBracketAtTinyAndHugeScales) {
  expect_lanczos_keeps_its_bracket_at_tiny_and_huge_scales(std::make_shared<TorchOperatorDevice>(torch::kCPU));
}

// GKL's basis on the device: every operation against its dense meaning
// (tests/support/krylov_basis_contract.h), the device's K_sab (LayerNorm, attention, residual) as
// the operator and its closed form as the dense matrix.
void expect_device_basis_meets_the_contract(const TorchOperatorDevice& device) {
  const BlockWeights w = test::random_block(8, 2, 32, 31);
  const BlockForward f = block_forward(w, test::random_tokens(6, 8, 37), SkipMode::kFull);
  const auto map = device.block_operator(w, f, "K_sab");
  const KrylovSpace space = device.krylov_space(*map);
  ASSERT_TRUE(space.make_basis);
  test::check_krylov_basis_contract(space, sab_jacobian(w, f), 1e-12);
}

TEST(TorchOperatorDevice, CpuKrylovBasisMeetsTheContract_n6_d8_h2) {
  expect_device_basis_meets_the_contract(TorchOperatorDevice(torch::kCPU));
}

// The same on a rectangular space: the skipless K_ffn restricted to the LayerNorm complement on
// the device (P of width n·(d − 2), Q of width n·d) against its closed form, the dense K_ffn times
// blockdiag_i(C_i).
void expect_ln_complement_basis_meets_the_contract(const TorchOperatorDevice& device) {
  const BlockWeights w = test::random_block(8, 2, 32, 47);
  const BlockForward f = block_forward(w, test::random_tokens(6, 8, 53), SkipMode::kNone);
  const auto map = device.block_operator(w, f, "K_ffn");
  const LayerNormComplement basis(f.ln2.x_hat);
  const auto restricted = device.ln_complement(*map, basis);
  const KrylovSpace space = device.krylov_space(*restricted);
  ASSERT_TRUE(space.make_basis);
  EXPECT_EQ(space.rows, 6 * 8);
  EXPECT_EQ(space.cols, 6 * 6);
  const Mat dense = right_multiply_tokenwise(ffn_jacobian(w, f).to_dense(), 6, layernorm_complement_bases(f.ln2.x_hat));
  test::check_krylov_basis_contract(space, dense, 1e-12);
}

TEST(TorchOperatorDevice, CpuLnComplementKrylovBasisMeetsTheContract_n6_d8_h2) {
  expect_ln_complement_basis_meets_the_contract(TorchOperatorDevice(torch::kCPU));
}

// A map the device did not make has no Krylov space there: refused by name, not misread.
TEST(TorchOperatorDevice, KrylovSpaceRefusesAMapItDidNotMake) {
  struct HostMap final : TokenMap {
    Index n() const override { return 2; }
    Index d_in() const override { return 3; }
    Index d_out() const override { return 3; }
    Mat apply(const Mat& dX) const override { return dX; }
    Mat apply_transpose(const Mat& G) const override { return G; }
  };
  try {
    TorchOperatorDevice(torch::kCPU).krylov_space(HostMap());
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not made by this device"), std::string::npos) << e.what();
  }
  try {
    TorchOperatorDevice(torch::kCPU).ln_complement(HostMap(), LayerNormComplement(test::random_tokens(2, 3, 1)));
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not made by this device"), std::string::npos) << e.what();
  }
}

// A basis of another shape than the map's input is refused by name.
TEST(TorchOperatorDevice, LnComplementRefusesABasisOfAnotherShape) {
  const BlockWeights w = test::random_block(8, 2, 32, 3);
  const BlockForward f = block_forward(w, test::random_tokens(5, 8, 3), SkipMode::kNone);
  const TorchOperatorDevice device(torch::kCPU);
  const auto map = device.block_operator(w, f, "K_sab");
  try {
    device.ln_complement(*map, LayerNormComplement(test::random_tokens(4, 8, 5)));
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the basis is 4 x 8, the map's input 5 x 8"), std::string::npos) << e.what();
  }
}

// K from TokenMap::assemble, written into memory on the map's device (a torch tensor there, read
// back as the column-major N_out × N_in matrix it holds).
Mat assembled(const TokenMap& map, const torch::Device& device) {
  const Index n_in = map.n() * map.d_in(), n_out = map.n() * map.d_out();
  at::Tensor buffer = torch::full({n_in * n_out}, std::nan(""), torch::TensorOptions().dtype(torch::kFloat64).device(device));
  EXPECT_TRUE(map.assemble(buffer.data_ptr<double>()));
  const at::Tensor host = buffer.cpu();
  return Eigen::Map<const Mat>(host.data_ptr<double>(), n_out, n_in);
}

// A host operator's matrix from its products on unit inputs (block_kernels, not ATen).
template <typename Op>
Mat host_columns(const Op& op) {
  const Index n = op.n_in(), d = op.d_in();
  Mat K(op.n_out() * op.d_out(), n * d);
  for (Index j = 0; j < n * d; ++j) {
    Mat E = Mat::Zero(n, d);
    E(j % n, j / n) = 1;  // vec index j = i + n·c (column-major)
    const Mat Y = op.apply(E);
    K.col(j) = Eigen::Map<const Vec>(Y.data(), Y.size());
  }
  return K;
}

// assemble(): every operator's matrix against the closed-form Jacobians of analysis/jacobians (an
// implementation independent of the products), in every skip mode, in one batch, one column a
// batch and batches that do not divide the columns; the ln-complement map against the host
// kernels' restriction, column by column.
void expect_assembly_equals_the_closed_form(const torch::Device& dev) {
  const Index n = 9, d = 12;
  const BlockWeights w = test::random_block(d, 3, 4 * d, 17, 0.7);
  const Mat X = test::random_tokens(n, d, 5);
  // Columns per batch: 1; at 2e5 bytes 7 of K_sa's and K_sab's 108, 11 of K_mlp's and K_ffn's, 7 of
  // the ln-complement map's 90 (column_bytes: 25 488, 17 280, 28 224), each with an uneven last batch; all.
  for (const double batch_bytes : {1.0, 2e5, TorchOperatorDevice::kAssemblyBatchBytes}) {
    const TorchOperatorDevice device(dev, batch_bytes);
    for (SkipMode skip : kSkipModes) {
      const BlockForward f = block_forward(w, X, skip);
      const std::map<std::string, Mat> closed_form = {
          {"K_sa", attention_jacobian(w, f.attn, AttentionPart::kFull)},
          {"B_sa", attention_jacobian(w, f.attn, AttentionPart::kB)},
          {"E_sa", attention_jacobian(w, f.attn, AttentionPart::kE)},
          {"K_sab", sab_jacobian(w, f)},
          {"K_mlp", mlp_jacobian(w, f.mlp).to_dense()},
          {"K_ffn", ffn_jacobian(w, f).to_dense()}};
      for (const auto& [matrix, K] : closed_form) {
        const std::string knobs = matrix + " skip " + to_string(skip) + " batch bytes " + std::to_string(batch_bytes);
        EXPECT_LE(test::rel_error(assembled(*device.block_operator(w, f, matrix), dev), K), test::kSameMathRounding)
            << knobs;
      }
      const LayerNormComplement basis(f.ln1.x_hat);
      const auto sab = device.block_operator(w, f, "K_sab");
      const Mat restricted = assembled(*device.ln_complement(*sab, basis), dev);
      EXPECT_LE(test::rel_error(restricted, host_columns(LnComplementOp<SabJacobianOp>(SabJacobianOp(w, f), basis))),
                test::kSameMathRounding)
          << "K_sab on the ln-complement, skip " << to_string(skip);
    }
  }
}

TEST(TorchOperatorDevice, CpuAssemblyEqualsTheClosedFormJacobians_n9_d12_h3) {
  expect_assembly_equals_the_closed_form(torch::kCPU);
}

// A NaN in the operator's weights: assemble() refuses the matrix in one line, naming the columns.
TEST(TorchOperatorDevice, AssemblyRefusesANonFiniteMatrix) {
  const BlockWeights w = test::random_block(8, 2, 32, 3);
  const BlockForward f = block_forward(w, test::random_tokens(5, 8, 4), SkipMode::kFull);
  BlockWeights broken = w;
  broken.Wo(2, 3) = std::nan("");
  const auto map = TorchOperatorDevice(torch::kCPU).block_operator(broken, f, "K_sa");
  at::Tensor buffer = torch::zeros({40 * 40}, torch::kFloat64);
  try {
    map->assemble(buffer.data_ptr<double>());
    ADD_FAILURE() << "a NaN weight was assembled";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("contains NaN or inf (columns 0..."), std::string::npos) << e.what();
  }
}

// assemble_columns and apply_columns (the Schur route's two products): a panel of K's columns and
// K times held inputs, against the whole assembled matrix, on the map's device.
void expect_panels_equal_the_assembled_matrix(const torch::Device& dev) {
  const BlockWeights w = test::random_block(12, 3, 48, 41, 0.7);
  const BlockForward f = block_forward(w, test::random_tokens(9, 12, 43), SkipMode::kFull);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(dev);
  for (const double batch_bytes : {1.0, 2e5}) {  // one column a batch; 7 a batch, an uneven last
    const TorchOperatorDevice device(dev, batch_bytes);
    for (const std::string matrix : {"K_sa", "K_sab", "K_ffn"}) {
      const auto map = device.block_operator(w, f, matrix);
      const Mat K = assembled(*map, dev);
      const Index N = K.rows(), first = 17, count = 30;
      at::Tensor panel = torch::full({N * count}, std::nan(""), opts);
      ASSERT_TRUE(map->assemble_columns(first, count, panel.data_ptr<double>()));
      const at::Tensor panel_host = panel.cpu();
      EXPECT_LE(test::rel_error(Eigen::Map<const Mat>(panel_host.data_ptr<double>(), N, count), K.middleCols(first, count)),
                test::kSameMathRounding)
          << matrix;  // the same products of the same unit inputs, batched differently
      const Mat X = Mat::Random(N, 5);
      const at::Tensor in = torch::from_blob(const_cast<double*>(X.data()), {N * 5}, torch::kFloat64).to(dev);
      at::Tensor out = torch::full({N * 5}, std::nan(""), opts);
      ASSERT_TRUE(map->apply_columns(in.data_ptr<double>(), 5, out.data_ptr<double>()));
      const at::Tensor out_host = out.cpu();
      EXPECT_LE(test::rel_error(Eigen::Map<const Mat>(out_host.data_ptr<double>(), N, 5), K * X), test::kSameMathRounding)
          << matrix;
    }
    const auto map = device.block_operator(w, f, "K_sa");
    at::Tensor panel = torch::zeros({108 * 2}, opts);
    EXPECT_THROW(map->assemble_columns(107, 2, panel.data_ptr<double>()), std::invalid_argument);  // past column 107
  }
}

TEST(TorchOperatorDevice, CpuPanelsEqualTheAssembledMatrix_n9_d12_h3) {
  expect_panels_equal_the_assembled_matrix(torch::kCPU);
}

// A dense N × N matrix as a TokenMap of N × 1 "token matrices" in host memory: the Schur route's
// algebra on matrices built for it (known spectra, a zero A11, a singular S). `columns` (optional):
// what assembly gives instead of A (factors that are not of the operator).
class HostMatrixMap final : public TokenMap {
 public:
  explicit HostMatrixMap(Mat A, std::optional<Mat> columns = std::nullopt)
      : A_(std::move(A)), columns_(columns ? std::move(*columns) : A_) {}
  Index n() const override { return A_.rows(); }
  Index d_in() const override { return 1; }
  Index d_out() const override { return 1; }
  Mat apply(const Mat& dX) const override { return A_ * dX; }
  Mat apply_transpose(const Mat& G) const override { return A_.transpose() * G; }
  bool assemble_columns(Index first, Index count, double* out) const override {
    Eigen::Map<Mat>(out, A_.rows(), count) = columns_.middleCols(first, count);
    return true;
  }
  bool apply_columns(const double* in, Index count, double* out) const override {
    Eigen::Map<Mat>(out, A_.rows(), count) = A_ * Eigen::Map<const Mat>(in, A_.rows(), count);
    return true;
  }
  std::string assembles_into() const override { return "cpu"; }

 private:
  Mat A_, columns_;
};

// U diag(σ) Vᵀ with Haar-like orthogonal U, V (QR of Gaussian matrices, fixed seed).
Mat with_singular_values(const Vec& sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  const Index N = sigma.size();
  const auto orthogonal = [&] {
    Mat G(N, N);
    for (Index k = 0; k < G.size(); ++k) G.data()[k] = normal(rng);
    return Mat(Eigen::HouseholderQR<Mat>(G).householderQ());
  };
  const Mat U = orthogonal(), V = orthogonal();
  return U * sigma.asDiagonal() * V.transpose();
}

// "c_1, c_2, …": the cuts as the route's note lists them.
std::string listed(const std::vector<Index>& cuts) {
  std::string out;
  for (const Index c : cuts) out += (out.empty() ? "" : ", ") + std::to_string(c);
  return out;
}

// The Schur route (analysis/spectral/schur_lu.h) on the host store: a constructed spectrum (σ from
// 1e-6 to 1, κ = 1e6 known) at two pieces cut anywhere, at three to six pieces (equal, lopsided,
// pieces of one index) and every panel width, exact and equal to the truth within the fast route's
// stated accuracy; the note says the cuts and the backward error after refinement.
TEST(SchurRoute, ConstructedSpectrumAtEveryCut) {
  const Index N = 60;
  Vec sigma(N);
  for (Index i = 0; i < N; ++i) sigma(i) = std::pow(10.0, -6.0 * static_cast<double>(i) / (N - 1));
  const HostMatrixMap map(with_singular_values(sigma, 5));
  const std::vector<std::vector<Index>> cut_sets = {{1}, {7}, {30}, {59}, {20, 40}, {1, 2, 59}, {7, 15, 30, 45, 52}};
  for (const std::vector<Index>& cuts : cut_sets) {
    for (const Index panel : {1, 8, 60}) {
      const SchurPlan plan{N, cuts, panel};
      const ConditionReport r = condition_schur(map, plan, "A");
      const std::string knobs = "cuts " + listed(cuts) + " panel " + std::to_string(panel) + ": " + r.note;
      ASSERT_EQ(r.status, Status::kExact) << knobs;
      EXPECT_EQ(r.method, "dense-schur-lu-lanczos");
      EXPECT_NEAR(r.sigma_max, 1.0, 1e-12) << knobs;
      EXPECT_NEAR(r.sigma_min / 1e-6, 1.0, 1e-9) << knobs;
      EXPECT_NE(r.note.find("block LU in " + std::to_string(cuts.size() + 1) + " pieces split at " + listed(cuts) +
                            " of 60"),
                std::string::npos)
          << knobs;
      EXPECT_NE(r.note.find("backward error <= "), std::string::npos) << knobs;
    }
  }
}

// The assumption fails: A = [0 I; I 0] has A^(1) = 0 (a zero pivot that says nothing about A,
// whose κ is 1): not-converged, named. So does a permutation whose leading block in three pieces,
// [I 0; 0 0], is singular (D_1 = 0) while A^(1) = I is not. A singular A with regular leading
// blocks (diag(1 … N−1, 0)): the last Schur complement's zero pivot, whose null vector (schur_lu.h
// (4)) the operator confirms: singular, at two pieces and at three; never a κ. Factors that are not
// of the operator (assembly gives diag(1 … N−1, 0), the products diag(1 … N−1, 1e-3)): the null
// vector e_N is not confirmed, not-converged, with its bound κ ≥ σ_max / ‖A e_N‖, here κ itself.
TEST(SchurRoute, AZeroPivotIsNamedNotAKappa) {
  const Index N = 30;
  Mat swap = Mat::Zero(N, N);
  swap.topRightCorner(N / 2, N / 2).setIdentity();
  swap.bottomLeftCorner(N / 2, N / 2).setIdentity();
  const ConditionReport a = condition_schur(HostMatrixMap(swap), SchurPlan::for_order(N), "swap");
  EXPECT_EQ(a.status, Status::kNotConverged);
  EXPECT_TRUE(std::isnan(a.kappa));
  EXPECT_NE(a.note.find("a pivot of the leading 15 x 15 block's factorisation is exactly zero: these cuts do not"),
            std::string::npos)
      << a.note;
  Mat rotate = Mat::Zero(N, N);  // [I 0 0; 0 0 I; 0 I 0] in pieces of 10
  rotate.topLeftCorner(10, 10).setIdentity();
  rotate.block(10, 20, 10, 10).setIdentity();
  rotate.block(20, 10, 10, 10).setIdentity();
  const ConditionReport c = condition_schur(HostMatrixMap(rotate), SchurPlan::for_order(N, 2e9, 3), "rotate");
  EXPECT_EQ(c.status, Status::kNotConverged);
  EXPECT_NE(c.note.find("the leading 20 x 20 block's factorisation is exactly zero"), std::string::npos) << c.note;
  EXPECT_EQ(condition_schur(HostMatrixMap(rotate), SchurPlan{N, {10}, 4}, "rotate").status, Status::kExact);
  Vec d = Vec::LinSpaced(N, 1, N);
  d(N - 1) = 0;
  for (const Index pieces : {2, 3}) {
    const ConditionReport b =
        condition_schur(HostMatrixMap(d.asDiagonal()), SchurPlan::for_order(N, 2e9, pieces), "singular");
    EXPECT_EQ(b.status, Status::kSingular) << b.note;
    EXPECT_TRUE(std::isinf(b.kappa)) << b.note;
    EXPECT_EQ(b.rank, -1) << b.note;
    EXPECT_NEAR(b.sigma_max, N - 1, 1e-12 * N) << b.note;
    EXPECT_EQ(b.sigma_min, 0.0) << b.note;  // A e_N = 0 exactly
    EXPECT_EQ(b.kappa_lo, b.sigma_max / noise_floor(N, N, b.sigma_max)) << b.note;
    EXPECT_EQ(b.note.rfind("a pivot of the last Schur complement is exactly zero; its null vector x has ||A x|| / ||x|| = "
                           "0 (0 unrefined, 0 refinement steps) <= the noise floor ",
                           0),
              0u)
        << b.note;
  }
  Vec near = d;
  near(N - 1) = 1e-3;
  for (const Index pieces : {2, 3}) {
    const ConditionReport m = condition_schur(HostMatrixMap(near.asDiagonal(), Mat(d.asDiagonal())),
                                              SchurPlan::for_order(N, 2e9, pieces), "mismatched");
    EXPECT_EQ(m.status, Status::kNotConverged) << m.note;
    EXPECT_TRUE(std::isnan(m.kappa)) << m.note;
    EXPECT_NE(m.note.find("||A x|| / ||x|| = 0.001 (0.001 unrefined, 0 refinement steps), above the noise floor"),
              std::string::npos)
        << m.note;  // M A e_N is e_N again: the Krylov space stops at once
    EXPECT_TRUE(std::isinf(m.kappa_hi)) << m.note;
    const double kappa = (N - 1) / 1e-3;
    EXPECT_LE(m.kappa_lo, kappa) << m.note;
    EXPECT_NEAR(m.kappa_lo / kappa, 1.0, 1e-9) << m.note;
  }
}

// A11 close to singular while A is not (A11 = 1e-10 I, κ(A) = 2.618): the elimination across the
// split is unstable there (unrefined backward error 3.6e-7 on this machine); refinement against
// the operator brings it to rounding, and κ is exact.
TEST(SchurRoute, AnIllConditionedA11IsRepairedByTheRefinement) {
  const Index N = 40, m = N / 2;
  Mat A(N, N);
  A << 1e-10 * Mat::Identity(m, m), Mat::Identity(m, m), Mat::Identity(m, m), Mat::Identity(m, m);
  const ConditionReport truth = jacond::condition_svd(A, "A");
  const HostMatrixMap map(A);
  CpuSchurStore store;
  SchurLuBackend<CpuSchurStore> backend(store, map, SchurPlan::for_order(N));
  const LuLanczosExtremes e = lu_lanczos_extremes(backend);
  ASSERT_EQ(e.outcome, LuLanczosExtremes::Outcome::kOk);
  EXPECT_NEAR(e.sigma_max / e.sigma_min / truth.kappa, 1.0, 1e-9);
  EXPECT_GT(backend.stats().backward_error_before, 1e-9);  // the unstable elimination ...
  EXPECT_LT(backend.stats().backward_error_after, 1e-15);  // ... and its repair
  const ConditionReport r = condition_schur(map, SchurPlan::for_order(N), "A");
  EXPECT_EQ(r.status, Status::kExact) << r.note;
  EXPECT_NEAR(r.kappa / truth.kappa, 1.0, 1e-9) << r.note;
}

// Where one step is not enough: a dense matrix of κ ≈ 13 whose leading 10 × 10 block has singular
// values graded from 1 to 1e-9, in three pieces: the elimination across the cuts leaves an
// unrefined backward error of 7e-6 (on this machine), one step does not reach rounding, two do
// (1.0e-16); κ is exact.
TEST(SchurRoute, AVeryIllConditionedLeadingBlockTakesMoreThanOneRefinementStep) {
  const Index N = 30, m = 10;
  const double delta = 1e-9;  // at 1e-12 five steps end at 1.7e-8: the refinement stalls (schur_lu.h)
  Vec graded(m);
  for (Index i = 0; i < m; ++i) graded(i) = std::pow(delta, static_cast<double>(i) / (m - 1));
  Mat A = with_singular_values(Vec::LinSpaced(N, 1, 3), 3);  // dense, κ 3
  A.topLeftCorner(m, m) = with_singular_values(graded, 4);   // σ from 1 down to δ
  const ConditionReport truth = jacond::condition_svd(A, "A");
  const HostMatrixMap map(A);
  CpuSchurStore store;
  SchurLuBackend<CpuSchurStore> backend(store, map, SchurPlan{N, {m, 20}, 4});
  const LuLanczosExtremes e = lu_lanczos_extremes(backend);
  const SchurStats& s = backend.stats();
  std::ostringstream stats;
  stats << "kappa " << truth.kappa << ", eta " << s.backward_error_before << " -> " << s.backward_error_after << " in "
        << s.refinements << " steps";
  ASSERT_EQ(e.outcome, LuLanczosExtremes::Outcome::kOk) << stats.str();
  EXPECT_GT(s.backward_error_before, 1e-6) << stats.str();
  EXPECT_GE(s.refinements, 2) << stats.str();
  EXPECT_LE(s.refinements, kSchurMaxRefinements) << stats.str();
  EXPECT_LT(s.backward_error_after, 1e-15) << stats.str();
  EXPECT_NEAR(e.sigma_max / e.sigma_min / truth.kappa, 1.0, 1e-9) << stats.str();
}

// The block Jacobians through LibTorch's CPU maps (the GPU's code, on the host): K_sa, B_sa, E_sa and
// K_sab of an `ours` and a `timm`-scaled block in every skip mode, in two pieces (at N/2 and a
// lopsided cut), three and four, equal to condition_fast of the assembled matrix; a singular one
// (E_sa; the skipless K_sab) singular, by a null vector the operator confirms: 14 of these 48 rows
// need (5) for it (the solves' Ritz vector 3.6 to 1 500 noise floors off; schur_lu.h), and were
// not-converged before it.
TEST(SchurRoute, BlockJacobiansEqualTheFullLu_n8_d16_h2) {
  const TorchOperatorDevice device(torch::kCPU, 2e5);
  for (const double logit_scale : {0.0, 0.7}) {
    const BlockWeights w = test::random_block(16, 2, 64, 47, logit_scale);
    const Mat X = test::random_tokens(8, 16, 53);
    for (SkipMode skip : kSkipModes) {
      const BlockForward f = block_forward(w, X, skip);
      for (const std::string matrix : {"K_sa", "B_sa", "E_sa", "K_sab"}) {
        const auto map = device.block_operator(w, f, matrix);
        const ConditionReport full = jacond::condition_fast(assembled(*map, torch::kCPU), matrix);
        for (const std::vector<Index>& cuts : std::vector<std::vector<Index>>{{64}, {100}, {40, 90}, {32, 64, 96}}) {
          const ConditionReport r = *cpu_dense_device()->condition_schur(*map, SchurPlan{128, cuts, 24}, matrix);
          const std::string knobs = matrix + " skip " + to_string(skip) + " cuts " + listed(cuts) + ": " + r.note;
          if (full.status != Status::kExact) {  // E_sa is singular (Prop. 2), and the skipless K_sab here
            ASSERT_EQ(full.status, Status::kSingular) << knobs;
            EXPECT_EQ(r.status, Status::kSingular) << knobs;  // by a null vector the operator confirms
            continue;
          }
          ASSERT_EQ(r.status, Status::kExact) << knobs;
          const double tol = std::max(1e-9, 128 * 2.2e-16 * full.kappa);  // two backward-stable solves' σ_min
          EXPECT_NEAR(r.kappa / full.kappa, 1.0, tol) << knobs;
        }
      }
    }
  }
}

// A block whose attention never writes its last output feature (W_O's last column zero) and its
// forward pass: K_sa has n exactly zero rows, the last n of the feature-major vectorisation, so
// inside the last piece of the Schur route.
std::pair<BlockWeights, BlockForward> never_written_feature_block(Index n, Index d) {
  BlockWeights w = test::random_block(d, 2, 4 * d, 61);
  w.Wo.col(d - 1).setZero();
  w.bo(d - 1) = 0;
  BlockForward f = block_forward(w, test::random_tokens(n, d, 67), SkipMode::kFull);
  return {std::move(w), std::move(f)};
}

// That K_sa on `dense`'s Schur route with `operators`' maps (two pieces and three): singular by the
// last Schur complement's null vector (schur_lu.h (4), (5)), as the host's SVD says (rank N − n).
void expect_a_never_written_feature_singular(const DenseDevice& dense, const OperatorDevice& operators, Index n,
                                             Index d, const std::string& method) {
  const auto [w, f] = never_written_feature_block(n, d);
  const Index N = n * d;
  const ConditionReport svd = jacond::condition_svd(attention_jacobian(w, f.attn), "K_sa");
  ASSERT_EQ(svd.status, Status::kSingular);
  ASSERT_EQ(svd.rank, N - n);
  const auto map = operators.block_operator(w, f, "K_sa");
  for (const Index pieces : {2, 3}) {
    const std::optional<ConditionReport> r = dense.condition_schur(*map, SchurPlan::for_order(N, 1e6, pieces), "K_sa");
    ASSERT_TRUE(r);
    const std::string knobs = std::to_string(pieces) + " pieces: " + r->note;
    EXPECT_EQ(r->method, method) << knobs;
    ASSERT_EQ(r->status, Status::kSingular) << knobs;
    EXPECT_LE(r->sigma_min, noise_floor(N, N, r->sigma_max)) << knobs;
    EXPECT_NEAR(r->sigma_max / svd.sigma_max, 1.0, 1e-9) << knobs;
    EXPECT_NE(r->note.find("its null vector x has"), std::string::npos) << knobs;
  }
}

TEST(SchurRoute, ANeverWrittenOutputFeatureIsSingularByTheNullVector_n40_d32_h2) {
  expect_a_never_written_feature_singular(*cpu_dense_device(), TorchOperatorDevice(torch::kCPU), 40, 32,
                                          "dense-schur-lu-lanczos");
}

// (5) is what makes it singular: in three pieces (4)'s null vector has ‖A x‖ / ‖x‖ 12.7 noise floors
// on this machine (its D_k formed by unrefined solves across the cuts); the Krylov space of M A
// brings it under a tenth of the floor (a 9 000th, in one step), checked by a fresh product.
TEST(SchurRoute, TheNullVectorIsRefinedAgainstTheOperator_n40_d32_h2) {
  const auto [w, f] = never_written_feature_block(40, 32);
  const Index N = 1280;
  const auto map = TorchOperatorDevice(torch::kCPU).block_operator(w, f, "K_sa");
  CpuSchurStore store;
  SchurLuBackend<CpuSchurStore> backend(store, *map, SchurPlan::for_order(N, 1e6, 3));
  const LuLanczosExtremes e = lu_lanczos_extremes(backend);
  ASSERT_EQ(e.outcome, LuLanczosExtremes::Outcome::kExactlySingular);
  ASSERT_EQ(backend.stats().singular_piece, 2);
  const double floor = noise_floor(N, N, e.sigma_max);
  const Vec x = backend.refined_null_vector(floor);
  const SchurStats& s = backend.stats();
  ASSERT_GT(s.null_residual_before, floor) << "precondition: (4) alone is no longer above the floor here, so "
                                              "this case no longer shows that (5) is needed";
  EXPECT_LE(s.null_residual_after, 0.1 * floor);
  EXPECT_GE(s.null_steps, 1);
  EXPECT_LE(s.null_steps, kSchurNullVectorSteps);
  EXPECT_NEAR(x.norm(), 1.0, 1e-12);
  const Mat Ax = map->apply(Eigen::Map<const Mat>(x.data(), 40, 32));
  EXPECT_LE(Ax.norm(), 0.1 * floor);
}

// (4) by itself, on a dense matrix whose last row is zero: D_1's last row is exactly zero, so its
// zero pivot sits under a full column u ≠ 0 of U, and x = [−A11⁻¹ A12 v; v] needs U11⁻¹ u, the
// store's offsets into the piece and the solve across the cut. (4)'s x is A's null vector to
// rounding (under the noise floor before (5): 0.1 of it on this machine; a wrong offset or sign
// gives O(1)), and the returned vector is parallel to the SVD's.
TEST(SchurRoute, TheZeroPivotsNullVectorIsTheMatrixsOwnWithoutRefinement) {
  const Index N = 30;
  Mat A = with_singular_values(Vec::LinSpaced(N, 1, 3), 11);
  A.row(N - 1).setZero();
  const HostMatrixMap map(A);
  CpuSchurStore store;
  SchurLuBackend<CpuSchurStore> backend(store, map, SchurPlan::for_order(N, 2e9, 2));
  const LuLanczosExtremes e = lu_lanczos_extremes(backend);
  ASSERT_EQ(e.outcome, LuLanczosExtremes::Outcome::kExactlySingular);
  ASSERT_EQ(backend.stats().singular_piece, 1);
  ASSERT_GT(backend.stats().zero_pivot, 0) << "u is empty: the case tests less";
  const double floor = noise_floor(N, N, e.sigma_max);
  const Vec x = backend.refined_null_vector(floor);
  EXPECT_LE(backend.stats().null_residual_before, floor);
  const Eigen::JacobiSVD<Mat> svd(A, Eigen::ComputeFullV);
  EXPECT_NEAR(std::abs(svd.matrixV().col(N - 1).dot(x)), 1.0, 1e-12);
}

// The host's store with a device LU's behaviour at a zero pivot: NaN past it (cuSOLVER may divide
// by it). (4) reads only U's rows above the pivot, so it still gives the null vector; (5), whose
// solves would read the NaN, is not run, and the note says so.
class NanPastTheZeroPivotStore : public CpuSchurStore {
 public:
  FactorOutcome lu_factor(double* a, Index m, Pivots& p, Index* zero_pivot) {
    const FactorOutcome f = CpuSchurStore::lu_factor(a, m, p, zero_pivot);
    if (f == FactorOutcome::kExactlySingular)
      for (Index j = *zero_pivot + 1; j < m; ++j)
        for (Index i = *zero_pivot + 1; i < m; ++i) a[i + j * m] = std::numeric_limits<double>::quiet_NaN();
    return f;
  }
};

TEST(SchurRoute, FactorsThatAreNotFinitePastTheZeroPivotLeaveTheNullVectorUnrefined_n8_d16_h2) {
  const auto [w, f] = never_written_feature_block(8, 16);
  const auto map = TorchOperatorDevice(torch::kCPU).block_operator(w, f, "K_sa");
  NanPastTheZeroPivotStore store;
  const ConditionReport r =
      condition_schur_with(store, *map, SchurPlan::for_order(128, 1e6, 2), "K_sa", "dense-schur-lu-lanczos");
  ASSERT_EQ(r.status, Status::kSingular) << r.note;  // (4) alone is under the floor at this size
  EXPECT_NE(r.note.find("0 refinement steps; the factors past the zero pivot are not finite: not refined)"),
            std::string::npos)
      << r.note;
}

// A dense device's Schur route takes the caller's checkpoint (a Ctrl-C from Python, block_reports'
// within_dense_solve): called before each panel and each inverse solve; what it throws leaves the
// route at once.
TEST(SchurRoute, TheDevicesRouteCallsTheCheckpointAndMayBeAbandoned) {
  const HostMatrixMap map(with_singular_values(Vec::LinSpaced(30, 1, 2), 7));
  int calls = 0;
  const std::optional<ConditionReport> r =
      cpu_dense_device()->condition_schur(map, SchurPlan{30, {10, 20}, 5}, "A", [&] { ++calls; });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, Status::kExact) << r->note;
  EXPECT_GT(calls, 6);  // two panels of each of the three pieces, then the solves
  struct Abandon {};
  EXPECT_THROW(cpu_dense_device()->condition_schur(map, SchurPlan{30, {10, 20}, 5}, "A", [] { throw Abandon{}; }),
               Abandon);
}

// A LibTorch map whose products fail from product `fail_at` on, by LibTorch itself: it hands the
// device's map a tangent one feature too wide, which ATen's GEMM refuses with the c10::Error that a
// CUDA out-of-memory or launch failure raises too, through the same on_device. It counts its
// products (apply, apply_transpose) and notes how many came before factor()'s first panel.
class FailingTorchMap final : public TokenMap {
 public:
  FailingTorchMap(const TokenMap& map, Index fail_at) : map_(map), fail_at_(fail_at) {}
  Index n() const override { return map_.n(); }
  Index d_in() const override { return map_.d_in(); }
  Index d_out() const override { return map_.d_out(); }
  Mat apply(const Mat& dX) const override { return map_.apply(failing() ? wider(dX) : dX); }
  Mat apply_transpose(const Mat& G) const override { return map_.apply_transpose(failing() ? wider(G) : G); }
  bool assemble_columns(Index first, Index count, double* out) const override {
    if (before_factor < 0) before_factor = products;
    return map_.assemble_columns(first, count, out);
  }
  bool apply_columns(const double* in, Index count, double* out) const override {
    return map_.apply_columns(in, count, out);
  }
  std::string assembles_into() const override { return map_.assembles_into(); }
  mutable Index products = 0, before_factor = -1;

 private:
  bool failing() const { return ++products >= fail_at_; }
  static Mat wider(const Mat& X) { return Mat::Ones(X.rows(), X.cols() + 1); }
  const TokenMap& map_;
  Index fail_at_;
};

// A device failure inside the Schur route's Lanczos runs is thrown with its one line, never
// reported as not-converged (κ NaN, the CLI's exit 3 instead of 1, the error's text lost): the
// route runs the map's products inside lu_lanczos.h's `finished`, which reads a std::runtime_error
// as a numerical outcome, so on_device throws a DeviceError. Failing at the third product (σ_max's
// Lanczos on AᵀA: gram) and at the third after the factorisation (σ_min's on (AᵀA)⁻¹: the
// transposed solve's products and the refinement's residuals in inverse_gram), K_sab of a CPU
// LibTorch map (N 128) in two pieces; without a failure the same route is exact.
TEST(SchurRoute, ADeviceErrorInItsProductsIsThrownNotReportedAsNotConverged_n8_d16_h2) {
  const TorchOperatorDevice device(torch::kCPU);
  const BlockWeights w = test::random_block(16, 2, 64, 47);
  const BlockForward f = block_forward(w, test::random_tokens(8, 16, 53), SkipMode::kFull);
  const auto map = device.block_operator(w, f, "K_sab");
  const SchurPlan plan = SchurPlan::for_order(128, 2e9, 2);
  FailingTorchMap counted(*map, std::numeric_limits<Index>::max());
  const ConditionReport whole = condition_schur(counted, plan, "K_sab");
  ASSERT_EQ(whole.status, Status::kExact) << whole.note;
  ASSERT_GT(counted.before_factor, 3);
  ASSERT_GT(counted.products, counted.before_factor + 3);
  for (const Index fail_at : {Index{3}, counted.before_factor + 3}) {
    const FailingTorchMap failing(*map, fail_at);
    try {
      const ConditionReport r = condition_schur(failing, plan, "K_sab");
      ADD_FAILURE() << "product " << fail_at << " failed and the route reported " << to_string(r.status) << ": "
                    << r.note;
    } catch (const DeviceError& e) {
      const std::string m = e.what();
      EXPECT_TRUE(m.find("matrix-free product (JVP) on cpu: ") != std::string::npos ||
                  m.find("matrix-free product (VJP) on cpu: ") != std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      EXPECT_EQ(failing.products, fail_at) << m;  // thrown at once: no product after the failing one
    }
  }
}

TEST(SchurRoute, RefusesAPlanOfAnotherOrderOrAnEmptyPiece) {
  const HostMatrixMap map(Mat::Identity(10, 10));
  EXPECT_THROW(condition_schur(map, SchurPlan{12, {6}, 2}, "I"), std::invalid_argument);
  EXPECT_THROW(condition_schur(map, SchurPlan{10, {0}, 2}, "I"), std::invalid_argument);
  EXPECT_THROW(condition_schur(map, SchurPlan{10, {10}, 2}, "I"), std::invalid_argument);
  EXPECT_THROW(condition_schur(map, SchurPlan{10, {5}, 0}, "I"), std::invalid_argument);
  EXPECT_THROW(condition_schur(map, SchurPlan{10, {5, 5}, 2}, "I"), std::invalid_argument);
  EXPECT_THROW(condition_schur(map, SchurPlan{10, {6, 3}, 2}, "I"), std::invalid_argument);
  EXPECT_THROW(condition_schur(map, SchurPlan{10, {}, 2}, "I"), std::invalid_argument);
}

// The fast route's options for the matrices a dense device may assemble (fast_on_device).
BlockReportOptions fast_route_options() {
  BlockReportOptions opt;
  opt.route = KappaRoute::kFast;
  opt.matrices = {"K_sa", "B_sa", "E_sa", "K_sab"};
  return opt;
}

// A dense device that takes condition_fast_assembled on the host (the map's assemble() into host
// memory, then the host's condition_fast), to test block_reports' dispatch without a GPU: which
// rows it routes there, that they are the host's reports, and that the caller's checkpoint
// (within_dense_solve, the GPU's Schur route's cancellation point) reaches it.
class HostAssemblingDevice final : public DenseDevice {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override { return "test: assembles through its operator device"; }
  ConditionReport condition_fast(Mat A, const std::string& matrix) const override {
    return cpu_dense_device()->condition_fast(std::move(A), matrix);
  }
  std::optional<ConditionReport> condition_fast_assembled(const TokenMap& map, const std::string& matrix,
                                                          const std::function<void()>& checkpoint) const override {
    if (map.assembles_into() != "cpu") return std::nullopt;  // host memory only, as the GPU's takes its own GPU's only
    if (checkpoint) checkpoint();
    Mat K(map.n() * map.d_out(), map.n() * map.d_in());
    if (!map.assemble(K.data())) return std::nullopt;
    ConditionReport r = jacond::condition_fast(std::move(K), matrix);
    r.note = "assembled by the map";
    return r;
  }
  Vec singular_values(Mat A) const override { return cpu_dense_device()->singular_values(std::move(A)); }
  ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) const override {
    return cpu_dense_device()->condition_mixed(std::move(A32), A, matrix);
  }
  bool fits(DenseRoute route, Index rows, Index cols, const DenseBudget& budget) const override {
    return cpu_dense_device()->fits(route, rows, cols, budget);
  }
};

// block_reports with an operator device and a dense device that assembles: the dense exact rows
// K_sa, B_sa, E_sa and K_sab (with its residual) go to condition_fast_assembled and equal the host's;
// a skipless K_sab (its ln-complement row needs K_sab on the host), the SVD route and a certified
// report stay on the host.
TEST(TorchOperatorDevice, DenseRowsAreAssembledOnTheDeviceWhereItCan_n8_d16_h2) {
  const BlockWeights w = test::random_block(16, 2, 64, 23);
  const Mat X = test::random_tokens(8, 16, 29);
  BlockReportOptions on_device = fast_route_options();
  on_device.device = std::make_shared<HostAssemblingDevice>();
  on_device.operator_device = std::make_shared<TorchOperatorDevice>(torch::kCPU);
  const auto expect_rows = [&](SkipMode skip, const BlockReportOptions& opt, const std::set<std::string>& assembled) {
    BlockReportOptions reference = opt;  // the same rows on the host alone
    reference.device = nullptr;
    reference.operator_device = nullptr;
    const auto a = block_reports(w, X, skip, opt), b = block_reports(w, X, skip, reference);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string knobs = a[i].matrix + "/" + a[i].space + " skip " + to_string(skip);
      const bool here = a[i].space == "full" && assembled.count(a[i].matrix) > 0;
      EXPECT_EQ(a[i].note.find("assembled by the map") != std::string::npos, here) << knobs << ": " << a[i].note;
      EXPECT_EQ(a[i].status, b[i].status) << knobs;
      EXPECT_EQ(a[i].method, b[i].method) << knobs;
      if (a[i].status == Status::kExact) {
        EXPECT_NEAR(a[i].kappa / b[i].kappa, 1.0, 1e-8) << knobs;
      }
    }
  };
  int checkpoints = 0;
  on_device.within_dense_solve = [&] { ++checkpoints; };
  expect_rows(SkipMode::kFull, on_device, {"K_sa", "B_sa", "E_sa", "K_sab"});
  EXPECT_EQ(checkpoints, 4);  // once in each assembled row (the host's full route takes none)
  expect_rows(SkipMode::kNone, on_device, {"K_sa", "B_sa", "E_sa"});
  BlockReportOptions svd = on_device;
  svd.route = KappaRoute::kSvd;
  expect_rows(SkipMode::kFull, svd, {});
  BlockReportOptions certified = on_device;
  certified.certify = CertifyMode::kInertia;
  expect_rows(SkipMode::kFull, certified, {});
}

// A dense device named "cuda" that declines every map (condition_fast_assembled: nullopt, as the
// GPU's did when its free memory held neither the whole LU nor any Schur plan) and records the
// matrices condition_fast is handed, which it answers with the host's.
class DecliningGpu final : public DenseDevice {
 public:
  std::string name() const override { return "cuda"; }
  std::string description() const override { return "cuda:0 test GPU (0.001 GB free of 80)"; }
  ConditionReport condition_fast(Mat A, const std::string& matrix) const override {
    handed.push_back(A.rows());
    return cpu_dense_device()->condition_fast(std::move(A), matrix);
  }
  std::optional<ConditionReport> condition_fast_assembled(const TokenMap&, const std::string&,
                                                          const std::function<void()>&) const override {
    ++asked;
    return std::nullopt;
  }
  Vec singular_values(Mat A) const override { return cpu_dense_device()->singular_values(std::move(A)); }
  ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) const override {
    return cpu_dense_device()->condition_mixed(std::move(A32), A, matrix);
  }
  bool fits(DenseRoute, Index, Index, const DenseBudget&) const override { return true; }
  mutable std::vector<Index> handed;
  mutable int asked = 0;
};

// A dense row the device declines is assembled on the host and handed over, which takes the full
// route's host bytes (K and its assembly's copy, fast_route_cost's 16 N²): past what the host may
// hold (host_memory_bytes) it is refused in one line naming the matrix, its order, the device
// (whose description says its free memory), both sizes and the lanczos route, before anything is
// assembled (at ViT-B that assembly was a 366 GB bad_alloc, or an out-of-memory kill, where the
// host's own route refuses by name). At exactly the full route's bytes the host copy is made and
// handed over. K_sa, n 8, d 16: N 128.
TEST(TorchOperatorDevice, ADeclinedDenseRowPastTheHostsMemoryIsRefusedByName_n8_d16_h2) {
  const BlockWeights w = test::random_block(16, 2, 64, 23);
  const Mat X = test::random_tokens(8, 16, 29);
  const Index N = 128;
  const double full = fast_route_cost(N, N, get_threads()).bytes;
  ASSERT_EQ(full, 16.0 * N * N);
  const auto gpu = std::make_shared<DecliningGpu>();
  BlockReportOptions opt = fast_route_options();
  opt.matrices = {"K_sa"};
  opt.device = gpu;
  opt.operator_device = std::make_shared<TorchOperatorDevice>(torch::kCPU);
  for (const double memory : {8.0 * N * N - 1, full - 1}) {
    opt.host_memory_bytes = memory;
    try {
      block_reports(w, X, SkipMode::kFull, opt);
      ADD_FAILURE() << "no error at " << memory << " bytes";
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      for (const char* needle : {"K_sa (128 x 128): cuda:0 test GPU (0.001 GB free of 80) did not assemble it",
                                 "a host copy for it holds 0.000262 GB", "lanczos"})
        EXPECT_NE(m.find(needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    EXPECT_TRUE(gpu->handed.empty()) << gpu->handed.size() << " matrices handed over at " << memory << " bytes";
  }
  EXPECT_EQ(gpu->asked, 2);  // the device was asked first each time
  opt.host_memory_bytes = full;
  const std::vector<ConditionReport> r = block_reports(w, X, SkipMode::kFull, opt);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, Status::kExact) << r[0].note;
  EXPECT_EQ(gpu->handed, (std::vector<Index>{N}));
}

// A training run tracked in a temporary folder, removed when it goes out of scope (passed or not).
class TrackedRuns {
 public:
  explicit TrackedRuns(const std::string& tag)
      : dir_(fs::temp_directory_path() / ("jacond_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    cfg_.model.dim = 16, cfg_.model.depth = 2, cfg_.model.heads = 2, cfg_.model.patch = 7;
    cfg_.batch = 16, cfg_.data_limit = 64, cfg_.test_limit = 32, cfg_.steps = 2, cfg_.warmup_steps = 1;
    cfg_.optimizer = "adamw", cfg_.threads = 1, cfg_.track_every = 2, cfg_.checkpoint_every = 100;
    cfg_.print_every = 100, cfg_.track_matrices = "K_sa,K_sab";
    cfg_.track_seconds = 0.5;  // K_sa's bottom is out of Krylov's reach here: not-converged, soon
  }
  ~TrackedRuns() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TrackedRuns(const TrackedRuns&) = delete;
  TrackedRuns& operator=(const TrackedRuns&) = delete;
  // models::train of the tiny run with `method` and `on`: its conditioning.csv and its log.
  std::pair<test::Csv, std::string> run(const std::string& name, const std::string& method, const models::TrackDevices& on) {
    models::TrainConfig c = cfg_;
    c.track_method = method;
    c.out_dir = (dir_ / name).string();
    std::ostringstream log;
    models::train(c, nullptr, log, nullptr, on);
    return {test::read_csv(dir_ / name / "conditioning.csv"), log.str()};
  }

 private:
  fs::path dir_;
  models::TrainConfig cfg_;
};

// The dense κ of two assemblies of K, which differ in rounding (O(eps·‖K‖) in σ_min): 45·eps·κ
// (bench dense's tolerance; `timm`'s K_sa here has κ up to 1e10), 1e-10 at least, which is what
// K_sab (κ ≈ 1.2, its skip) is held to.
double kappa_tolerance(double kappa) { return std::max(1e-10, 45 * std::numeric_limits<double>::epsilon() * kappa); }

// models::train with TrackDevices (what `jacond train --device cuda` passes: select_track_devices)
// tracks on them: the dense rows through the dense device (assembled by the operator device's map)
// and the lanczos rows with the operator device's products (method gkl-torch-cpu), each equal to,
// or bracketing, the κ of the same run tracked on the host; the log names where. Training is the
// same in every run (the CPU, one thread), so step k's rows are of the same weights.
TEST(TorchOperatorDevice, TrainingTracksOnTheDevicesItIsGiven_d16_h2) {
  TrackedRuns runs("track_devices");
  const auto products = std::make_shared<TorchOperatorDevice>(torch::kCPU);
  const auto [host, host_log] = runs.run("host", "dense", {});
  const auto [dense, dense_log] = runs.run("dense", "dense", {std::make_shared<HostAssemblingDevice>(), products});
  const auto [lanczos, lanczos_log] = runs.run("lanczos", "lanczos", {nullptr, products});
  EXPECT_EQ(host_log.find("conditioning tracking"), std::string::npos) << host_log;
  EXPECT_NE(dense_log.find("conditioning tracking of K_sa,K_sab: dense routes on test: assembles through its operator "
                           "device, matrix-free products on " + products->description() + " (the other rows on the host)"),
            std::string::npos) << dense_log;
  EXPECT_NE(lanczos_log.find("conditioning tracking of K_sa,K_sab: dense routes on the host, matrix-free products on "),
            std::string::npos) << lanczos_log;
  // Steps 0 and 2; two layers; K_sa and K_sab: 8 rows.
  ASSERT_EQ(host.rows.size(), 8u);
  ASSERT_EQ(dense.rows.size(), host.rows.size());
  ASSERT_EQ(lanczos.rows.size(), host.rows.size());
  int bracketed = 0;
  for (size_t i = 0; i < host.rows.size(); ++i) {
    const auto& h = host.rows[i];
    const std::string knobs = "step " + h.at("step") + " layer " + h.at("layer") + " " + h.at("matrix");
    ASSERT_EQ(h.at("status"), "exact") << knobs;
    const double kappa = test::to_double(h.at("kappa")), tol = kappa_tolerance(kappa);
    const auto& d = dense.rows[i];
    ASSERT_EQ(d.at("step") + d.at("layer") + d.at("matrix"), h.at("step") + h.at("layer") + h.at("matrix"));
    EXPECT_NE(d.at("note").find("assembled by the map"), std::string::npos) << knobs << ": " << d.at("note");
    EXPECT_EQ(d.at("status"), "exact") << knobs;
    EXPECT_NEAR(test::to_double(d.at("kappa")) / kappa, 1.0, tol) << knobs << ", kappa " << kappa;
    const auto& l = lanczos.rows[i];
    ASSERT_EQ(l.at("step") + l.at("layer") + l.at("matrix"), h.at("step") + h.at("layer") + h.at("matrix"));
    EXPECT_EQ(l.at("method"), "gkl-torch-cpu") << knobs;
    EXPECT_LE(test::to_double(l.at("kappa_lo")), kappa * (1 + tol)) << knobs;  // a lower bound, converged or not
    if (l.at("status") != "bracket") continue;
    ++bracketed;
    EXPECT_GE(test::to_double(l.at("kappa_hi")), kappa * (1 - tol)) << knobs;
  }
  EXPECT_GE(bracketed, 4) << "K_sab's four rows at least";
}

// A dense device whose every call fails as a GPU out of memory would (DeviceError).
class FailingDevice final : public DenseDevice {
 public:
  std::string name() const override { return "cuda"; }
  std::string description() const override { return "test: fails"; }
  ConditionReport condition_fast(Mat, const std::string&) const override { throw fail(); }
  std::optional<ConditionReport> condition_fast_assembled(const TokenMap&, const std::string&,
                                                          const std::function<void()>&) const override {
    throw fail();
  }
  Vec singular_values(Mat) const override { throw fail(); }
  ConditionReport condition_mixed(MatF, const LinearMap&, const std::string&) const override { throw fail(); }
  bool fits(DenseRoute, Index, Index, const DenseBudget&) const override { return true; }

 private:
  static DeviceError fail() { return DeviceError("test device: out of memory"); }
};

// Tracking on a device that fails does not stop training: the log says so once and every row,
// of that call and the next, is the host's.
TEST(TorchOperatorDevice, TrainingTracksOnTheHostWhenItsDeviceFails_d16_h2) {
  TrackedRuns runs("track_fails");
  const auto [host, host_log] = runs.run("host", "dense", {});
  const auto [failed, failed_log] =
      runs.run("failed", "dense", {std::make_shared<FailingDevice>(), std::make_shared<TorchOperatorDevice>(torch::kCPU)});
  const std::string said = "conditioning tracking on the device failed (test device: out of memory); tracking on the "
                           "host from now on";
  const size_t at = failed_log.find(said);
  ASSERT_NE(at, std::string::npos) << failed_log;
  EXPECT_EQ(failed_log.find(said, at + 1), std::string::npos) << "said once: " << failed_log;
  ASSERT_EQ(failed.rows.size(), host.rows.size());
  ASSERT_EQ(failed.rows.size(), 8u);
  for (size_t i = 0; i < host.rows.size(); ++i) {
    EXPECT_EQ(failed.rows[i].at("method"), host.rows[i].at("method"));
    EXPECT_EQ(failed.rows[i].at("kappa"), host.rows[i].at("kappa")) << "the host's own route: the same bits";
  }
}

// Whether this LibTorch sees a GPU; `why` not, where given (cuda_operator_device's reason).
bool have_cuda(std::string* why = nullptr) { return models::cuda_operator_device(why) != nullptr; }

using jacond::test::expect_gpu;  // support/expect_gpu.h

// A GPU test skips where this LibTorch sees no GPU (CI), but fails, naming why, under
// JACOND_EXPECT_GPU=1: on the GPU machine a CPU-only LibTorch or a driver CUDA refuses would
// otherwise skip every test below and the run would read as passed.
#define REQUIRE_CUDA()                                                                                    \
  if (std::string why; !have_cuda(&why)) {                                                                \
    if (expect_gpu()) FAIL() << "JACOND_EXPECT_GPU=1 and no GPU for these tests: " << why;               \
    GTEST_SKIP() << "needs a CUDA LibTorch and a GPU (the CPU device runs the same code above): " << why; \
  }

void require_cuda() { REQUIRE_CUDA(); }

// REQUIRE_CUDA under JACOND_EXPECT_GPU=1: a failure naming the reason where there is no GPU, nothing
// where there is one (so this test runs, and passes, on both machines).
TEST(OperatorDeviceCuda, UnderExpectGpuAMissingGpuFailsNamingWhy) {
  std::string why;
  const bool here = have_cuda(&why);
  EXPECT_EQ(why.empty(), here) << why;
  const ScopedEnv expect("JACOND_EXPECT_GPU", "1");
  if (here) {
    require_cuda();
  } else {
    EXPECT_FATAL_FAILURE(require_cuda(), "JACOND_EXPECT_GPU=1 and no GPU for these tests: this LibTorch");
  }
}

TEST(OperatorDeviceCuda, KrylovBasisMeetsTheContract_n6_d8_h2) {
  REQUIRE_CUDA();
  expect_device_basis_meets_the_contract(TorchOperatorDevice(torch::Device(torch::kCUDA, 0)));
}

TEST(OperatorDeviceCuda, LnComplementEqualsTheHosts_n7_d12_h3) {
  REQUIRE_CUDA();
  expect_ln_complement_equals_the_host(TorchOperatorDevice(torch::Device(torch::kCUDA, 0)));
  expect_ln_complement_basis_meets_the_contract(TorchOperatorDevice(torch::Device(torch::kCUDA, 0)));
}

TEST(OperatorDeviceCuda, ProductsEqualTheHostKernels_n9_d12_h3) {
  REQUIRE_CUDA();
  expect_products_equal_the_host(TorchOperatorDevice(torch::Device(torch::kCUDA, 0)));
}

TEST(OperatorDeviceCuda, LanczosReportsBracketTheExactKappa_n8_d16_h2) {
  REQUIRE_CUDA();
  const auto device = models::cuda_operator_device();
  ASSERT_TRUE(device);
  EXPECT_EQ(device->name(), "cuda");
  expect_lanczos_reports_bracket_the_exact_kappa(device);
}

TEST(OperatorDeviceCuda, LanczosKeepsItsBracketAtTinyAndHugeScales) {
  REQUIRE_CUDA();
  expect_lanczos_keeps_its_bracket_at_tiny_and_huge_scales(models::cuda_operator_device());
}

TEST(OperatorDeviceCuda, PanelsEqualTheAssembledMatrix_n9_d12_h3) {
  REQUIRE_CUDA();
  expect_panels_equal_the_assembled_matrix(torch::Device(torch::kCUDA, 0));
}

TEST(OperatorDeviceCuda, AssemblyEqualsTheClosedFormJacobians_n9_d12_h3) {
  REQUIRE_CUDA();
  expect_assembly_equals_the_closed_form(torch::Device(torch::kCUDA, 0));
}

#ifdef JACOND_CUDA_MODULE_PATH
// The GPU end to end, as `jacond block --device cuda` runs it: the dense device of the CUDA module
// (cuSOLVER) and the operators' CUDA twin (ATen) together, the fast route's K_sa, B_sa, E_sa and
// K_sab (with its residual) assembled on the GPU: the host's reports, each noted as assembled there.
TEST(OperatorDeviceCuda, BlockReportsAssembleTheDenseRowsOnTheGpu_n40_d32_h2) {
  REQUIRE_CUDA();
  const BlockWeights w = test::random_block(32, 2, 128, 31);
  const Mat X = test::random_tokens(40, 32, 37);
  const BlockReportOptions host = fast_route_options();
  BlockReportOptions gpu = host;
  gpu.device = load_cuda_dense_device({JACOND_CUDA_MODULE_PATH}, "test");
  gpu.operator_device = models::cuda_operator_device();
  ASSERT_TRUE(gpu.operator_device);
  const auto a = block_reports(w, X, SkipMode::kFull, gpu), b = block_reports(w, X, SkipMode::kFull, host);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string knobs = a[i].matrix + "/" + a[i].space + ": " + a[i].note;
    EXPECT_EQ(a[i].method, "dense-lu-lanczos-cuda") << knobs;
    EXPECT_NE(a[i].note.find("assembled on the GPU"), std::string::npos) << knobs;
    EXPECT_EQ(a[i].status, b[i].status) << knobs;
    if (b[i].status == Status::kExact) {  // σ_min of two backward-stable LUs: O(nd·eps·κ) relative
      const double tol = std::max(1e-9, 1280 * 2.2e-16 * b[i].kappa);
      EXPECT_NEAR(a[i].kappa / b[i].kappa, 1.0, tol) << knobs;
    }
  }
}

// The Schur route on the GPU (the route ViT-B's K_sa takes: two pieces on an H200, three on an
// H100; schur_lu.h), forced on small maps in two pieces at an even and a lopsided cut and in three:
// the host's full-LU κ, method dense-schur-lu-lanczos-cuda,
// the same outcome as the host store's run of the same algorithm (SchurRoute.* above).
TEST(OperatorDeviceCuda, SchurRouteAgreesWithTheHostsFullLu_n40_d32_h2) {
  REQUIRE_CUDA();
  const BlockWeights w = test::random_block(32, 2, 128, 31);
  const BlockForward f = block_forward(w, test::random_tokens(40, 32, 37), SkipMode::kFull);
  const auto dense = load_cuda_dense_device({JACOND_CUDA_MODULE_PATH}, "test");
  const auto gpu = models::cuda_operator_device();
  ASSERT_TRUE(gpu);
  const TorchOperatorDevice host(torch::kCPU);
  for (const std::string matrix : {"K_sa", "K_sab"}) {
    const auto map = gpu->block_operator(w, f, matrix);
    const ConditionReport full = jacond::condition_fast(assembled(*host.block_operator(w, f, matrix), torch::kCPU), matrix);
    ASSERT_EQ(full.status, Status::kExact) << matrix;
    for (const SchurPlan& plan :
         {SchurPlan::for_order(1280, 1e6), SchurPlan{1280, {1000}, 100}, SchurPlan::for_order(1280, 1e6, 3)}) {
      int checkpoints = 0;
      const std::optional<ConditionReport> r = dense->condition_schur(*map, plan, matrix, [&] { ++checkpoints; });
      ASSERT_TRUE(r) << matrix;
      const std::string knobs = matrix + " cuts " + listed(plan.cuts) + ": " + r->note;
      EXPECT_GT(checkpoints, plan.pieces()) << knobs;  // a panel of each piece, then the solves
      EXPECT_EQ(r->method, "dense-schur-lu-lanczos-cuda") << knobs;
      ASSERT_EQ(r->status, Status::kExact) << knobs;
      EXPECT_NEAR(r->kappa / full.kappa, 1.0, std::max(1e-9, 1280 * 2.2e-16 * full.kappa)) << knobs;
      EXPECT_NE(r->note.find("assembled on the GPU"), std::string::npos) << knobs;
    }
  }
}

// The same on the GPU: cuSOLVER's zero pivot, cublasDtrsv's null vector, the pivots replaced on
// the device, the map's products there (the CPU device runs the same code in SchurRoute.
// ANeverWrittenOutputFeature… above).
TEST(OperatorDeviceCuda, ANeverWrittenOutputFeatureIsSingularByTheNullVector_n40_d32_h2) {
  REQUIRE_CUDA();
  const auto dense = load_cuda_dense_device({JACOND_CUDA_MODULE_PATH}, "test");
  const auto gpu = models::cuda_operator_device();
  ASSERT_TRUE(gpu);
  expect_a_never_written_feature_singular(*dense, *gpu, 40, 32, "dense-schur-lu-lanczos-cuda");
}
#endif

TEST(OperatorDeviceCuda, WithoutAGpuTheHostRunsTheProductsAndSaysWhy) {
  if (have_cuda()) GTEST_SKIP() << "this LibTorch sees a GPU";
  std::string why;
  EXPECT_FALSE(models::cuda_operator_device(&why));
  EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
}

}  // namespace
