// SOAP (models/optim/soap.h): reduces to LibTorch's AdamW when its eigenbasis is frozen at the identity
// (an independent oracle), converges on an ill-conditioned quadratic, keeps orthonormal
// eigenbases that become eigenvectors of a stationary L, skips its statistics-only first step,
// respects max_precond_dim, and round-trips its state. Its matrices step in groups of one shape:
// bitwise as each alone, in as many operations for one block as for ten, and on a GPU
// (SoapCuda.*, skipped without one) as on the CPU.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/optim/soap.h"
#include "support/aten_op_count.h"
#include "support/expect_gpu.h"

namespace jacond {
namespace {

using models::Soap;
using models::SoapOptions;

torch::Tensor random_like_seeded(const torch::Tensor& t, int64_t seed) {
  auto g = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  return torch::randn(t.sizes(), g, torch::TensorOptions().dtype(torch::kFloat64));
}

std::vector<torch::Tensor> make_params() {
  auto g = at::detail::createCPUGenerator(7);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  return {torch::randn({6, 5}, g, opts).requires_grad_(), torch::randn({5}, g, opts).requires_grad_(),
          torch::randn({4, 3, 2, 2}, g, opts).requires_grad_()};
}

// `into` takes the state `from` saves, through the bytes of a checkpoint archive.
void load_state(const Soap& from, Soap& into) {
  torch::serialize::OutputArchive out;
  from.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  std::istringstream is(bytes.str());
  in.load_from(is);
  into.load(in);
}

// Same pseudo-gradients for both optimizers: a fixed function of (param, step).
void set_grads(std::vector<torch::Tensor>& ps, int64_t step) {
  for (size_t i = 0; i < ps.size(); ++i) {
    auto g = random_like_seeded(ps[i], 1000 * step + static_cast<int64_t>(i)) * (1.0 + 0.1 * step);
    ps[i].mutable_grad() = g;
  }
}

// The matrices of `depth` ViT blocks of width d (qkv [3d, d], proj [d, d], fc1 [4d, d], fc2 [d, 4d])
// in a model's order (block by block), and qkv's bias.
std::vector<torch::Tensor> vit_like_params(int depth, int64_t d, int64_t seed) {
  auto g = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);  // set_grads' dtype
  std::vector<torch::Tensor> ps;
  for (int l = 0; l < depth; ++l)
    for (const auto& shape : std::vector<std::vector<int64_t>>{{3 * d, d}, {3 * d}, {d, d}, {4 * d, d}, {d, 4 * d}}) {
      ps.push_back((0.1 * torch::randn(shape, g, opts)).requires_grad_());
    }
  return ps;
}

// On a GPU a small model's SOAP step is bound by launches (the first H200 run: SOAP's step 1.65×
// AdamW's at d 192, depth 6; reports/gpu). The matrices of one shape step together, so the
// operations that launch kernels are as many for two blocks' matrices as for ten blocks': a plain
// step, and a step that refreshes the eigenbases. (Two, not one: a group of one takes its
// gradient as a view, where a group of more stacks them.) (The 1-D parameters step through adamw_step,
// multi-tensor on a GPU and one tensor at a time on the CPU: AdamW's own test counts those.)
TEST(Soap, OneShapesMatricesStepTogetherWhateverTheirNumber) {
  std::vector<jacond::test::AtenOpCount> plain, refresh;
  for (int depth : {2, 10}) {
    std::vector<torch::Tensor> ps;
    for (auto& p : vit_like_params(depth, 8, 17))
      if (p.dim() == 2) ps.push_back(p);
    SoapOptions o;
    o.precondition_frequency = 2;
    o.batched_on_cpu = true;  // the device's order
    Soap soap(ps, o);
    set_grads(ps, 1);
    soap.step();  // statistics only
    set_grads(ps, 2);
    plain.push_back(jacond::test::count_top_level_ops([&] { soap.step(); }));  // t = 1
    set_grads(ps, 3);
    refresh.push_back(jacond::test::count_top_level_ops([&] { soap.step(); }));  // t = 2: refreshes
    std::cout << depth << " blocks: " << plain.back().computing << " computing operations a step ("
              << plain.back().all << " with views), " << refresh.back().computing << " ("
              << refresh.back().all << ") with the refresh\n";
  }
  EXPECT_EQ(plain[1].computing, plain[0].computing);
  EXPECT_EQ(refresh[1].computing, refresh[0].computing);
  EXPECT_GT(refresh[0].computing, plain[0].computing);  // the refresh is counted
}

// Grouping changes how many operations a step issues, not what they compute: matrices stepped in
// groups (three blocks' four shapes, and qkv's biases), in the device's batched order and in the
// CPU's member by member, end bitwise where each stepped alone (in the CPU's order) does,
// eigenbases included, over refreshes (every 3rd step). One fc1 misses its gradient at step 5: it
// leaves its group (the others step on without it) and stays one step behind, exactly as alone.
TEST(Soap, AGroupStepsAsItsMembersWouldAlone) {
  for (bool batched : {true, false}) {
    SCOPED_TRACE(batched ? "batched" : "member by member");
    auto grouped = vit_like_params(3, 6, 23);
    std::vector<torch::Tensor> alone;
    for (auto& p : grouped) alone.push_back(p.detach().clone().requires_grad_());
    SoapOptions o;
    o.precondition_frequency = 3;
    std::vector<std::unique_ptr<Soap>> each;  // the CPU's own order
    for (auto& p : alone) each.push_back(std::make_unique<Soap>(std::vector<torch::Tensor>{p}, o));
    o.batched_on_cpu = batched;
    Soap together(grouped, o);
    const size_t skipper = 8;  // block 1's fc1
    ASSERT_EQ(grouped[skipper].sizes(), (std::vector<int64_t>{24, 6}));
    for (int64_t t = 1; t <= 12; ++t) {
      set_grads(grouped, t);
      set_grads(alone, t);
      if (t == 5) {
        grouped[skipper].mutable_grad().reset();
        alone[skipper].mutable_grad().reset();
      }
      together.step();
      for (auto& s : each) s->step();
      if (t == 4) {
        EXPECT_EQ(together.matrix_groups(), 4u);  // qkv, proj, fc1, fc2
      }
    }
    EXPECT_EQ(together.matrix_groups(), 5u);  // fc1 split in two
    EXPECT_EQ(together.steps(skipper), 11);
    EXPECT_EQ(together.steps(skipper + 5), 12);
    for (size_t i = 0; i < grouped.size(); ++i) {
      EXPECT_TRUE(torch::equal(grouped[i].detach(), alone[i].detach())) << "param " << i;
      EXPECT_EQ(together.steps(i), each[i]->steps(0)) << "param " << i;
      for (int side = 0; side < 2; ++side) {
        const auto a = together.eigenbasis(i, side), b = each[i]->eigenbasis(0, side);
        ASSERT_EQ(a.defined(), b.defined()) << "param " << i << " side " << side;
        if (a.defined()) {
          EXPECT_TRUE(torch::equal(a, b)) << "param " << i << " side " << side;
        }
      }
    }
  }
}

// A checkpoint of groups, one of them split (a member missed a gradient): each member's slice is
// saved as its own entry, and load() forms the groups again by shape, decay and step count. The
// loaded optimizer continues bitwise as the one saved, in both orders, with the split kept.
TEST(Soap, GroupsWithASplitRoundTripThroughAState) {
  for (bool batched : {true, false}) {
    SCOPED_TRACE(batched ? "batched" : "member by member");
    auto a = vit_like_params(3, 6, 29);
    SoapOptions o;
    o.precondition_frequency = 3;
    o.batched_on_cpu = batched;
    Soap first(a, o);
    const size_t skipper = 3;  // block 0's fc1
    for (int64_t t = 1; t <= 7; ++t) {
      set_grads(a, t);
      if (t == 5) a[skipper].mutable_grad().reset();
      first.step();
    }
    ASSERT_EQ(first.matrix_groups(), 5u);
    std::vector<torch::Tensor> b;
    for (auto& p : a) b.push_back(p.detach().clone().requires_grad_());
    Soap second(b, o);
    load_state(first, second);
    EXPECT_EQ(second.matrix_groups(), 5u);
    EXPECT_EQ(second.steps(skipper), 6);
    EXPECT_EQ(second.steps(skipper + 5), 7);
    for (int64_t t = 8; t <= 14; ++t) {
      set_grads(a, t);
      set_grads(b, t);
      first.step();
      second.step();
    }
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i].detach(), b[i].detach())) << "param " << i;
      EXPECT_EQ(first.steps(i), second.steps(i)) << "param " << i;
    }
  }
}

// On a GPU (skipped without one): grouped SOAP there (batched bmm, eigh and QR on the device)
// takes the CPU's steps. fp64, square matrices: full-rank statistics with distinct eigenvalues, so
// each eigenbasis is fixed up to its columns' signs, which cancel in the step; what is left is the
// eigenvectors' rounding, ~eps·‖L‖/gap, far below 1e-8.
TEST(SoapCuda, GroupedStepsOnTheGpuAreTheCpus) {
  JACOND_REQUIRE_GPU(torch::cuda::is_available(), "no CUDA LibTorch or no GPU here (the CPU tests above run the same code)");
  auto g = at::detail::createCPUGenerator(31);
  std::vector<torch::Tensor> host, device;
  for (int copy = 0; copy < 3; ++copy)
    for (int64_t n : {8, 12}) {
      host.push_back(torch::randn({n, n}, g, torch::kFloat64).requires_grad_());
      device.push_back(host.back().detach().to(torch::kCUDA).requires_grad_());
    }
  std::vector<torch::Tensor> initial;
  for (auto& p : host) initial.push_back(p.detach().clone());
  SoapOptions o;
  o.precondition_frequency = 3;
  Soap on_host(host, o), on_device(device, o);
  for (int64_t t = 1; t <= 12; ++t) {
    set_grads(host, t);
    for (size_t i = 0; i < host.size(); ++i) device[i].mutable_grad() = host[i].grad().to(torch::kCUDA);
    on_host.step();
    on_device.step();
  }
  EXPECT_EQ(on_device.matrix_groups(), 2u);
  for (size_t i = 0; i < host.size(); ++i) {
    const auto moved = (host[i].detach() - initial[i]).norm().item<double>();  // eleven steps' worth
    ASSERT_GT(moved, 0) << i;
    EXPECT_LT((device[i].detach().cpu() - host[i].detach()).norm().item<double>() / moved, 1e-8) << i;
  }
}

TEST(Soap, IdentityBasisIsAdamW) {
  auto a = make_params();
  std::vector<torch::Tensor> b;
  for (auto& p : a) b.push_back(p.detach().clone().requires_grad_());
  SoapOptions o;
  o.lr = 1e-2;
  o.identity_basis = true;
  Soap soap(a, o, {true, false, true});
  // AdamW with the same hyper-parameters; param 1 without decay (its own group).
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd));
  };
  groups.emplace_back(std::vector<torch::Tensor>{b[0], b[2]}, opts(o.weight_decay));
  groups.emplace_back(std::vector<torch::Tensor>{b[1]}, opts(0.0));
  torch::optim::AdamW adamw(groups, torch::optim::AdamWOptions(o.lr));
  for (int64_t t = 1; t <= 25; ++t) {
    set_grads(a, t);
    set_grads(b, t);
    soap.step();
    adamw.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = (a[i] - b[i]).norm().item<double>() / b[i].norm().item<double>();
    EXPECT_LT(err, 1e-13) << "param " << i;
  }
  // Negative control: a different β₂ must be visible at this tolerance.
  auto c = make_params();
  o.beta2 = 0.9;
  Soap other(c, o, {true, false, true});
  for (int64_t t = 1; t <= 25; ++t) {
    set_grads(c, t);
    other.step();
  }
  EXPECT_GT((c[0] - b[0]).norm().item<double>() / b[0].norm().item<double>(), 1e-6);
}

TEST(Soap, FirstStepCollectsStatisticsOnly) {
  auto ps = make_params();
  std::vector<torch::Tensor> before;
  for (auto& p : ps) before.push_back(p.detach().clone());
  Soap soap(ps, SoapOptions{});
  set_grads(ps, 1);
  soap.step();
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(torch::equal(ps[i].detach(), before[i])) << i;
  set_grads(ps, 2);
  soap.step();
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_FALSE(torch::equal(ps[i].detach(), before[i])) << i;
}

// f(W) = ½‖A W B − C‖²_F with κ(A) = κ(B) = 30: SOAP must drive it to a small fraction.
TEST(Soap, ConvergesOnIllConditionedQuadratic) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto g = at::detail::createCPUGenerator(3);
  auto orth = [&](int64_t n) { return std::get<0>(torch::linalg_qr(torch::randn({n, n}, g, opts))); };
  auto spectrum = [&](int64_t n) { return torch::logspace(0, std::log10(30.0), n, 10, opts); };
  const int64_t m = 12, k = 8;
  auto A = orth(m).mm(torch::diag(spectrum(m))).mm(orth(m));
  auto B = orth(k).mm(torch::diag(spectrum(k))).mm(orth(k));
  auto C = torch::randn({m, k}, g, opts);
  auto W = torch::zeros({m, k}, opts).requires_grad_();
  auto loss_of = [&] { return 0.5 * (A.mm(W).mm(B) - C).pow(2).sum(); };
  const double initial = loss_of().item<double>();
  // The optimum: W* = A⁻¹ C B⁻¹ (both invertible), f(W*) = 0.
  // Linearly decaying lr (a constant-lr Adam-type method hovers at a noise floor ~ lr).
  auto run = [&](bool identity_basis) {
    torch::NoGradGuard ng;
    W.zero_();
    SoapOptions o;
    o.lr = 3e-2;
    o.weight_decay = 0;
    o.identity_basis = identity_basis;
    Soap soap({W}, o);
    const int T = 600;
    double f = 0;
    for (int t = 0; t < T; ++t) {
      soap.set_lr(3e-2 * (1.0 - static_cast<double>(t) / T));
      {
        torch::AutoGradMode on(true);
        soap.zero_grad();
        auto loss = loss_of();
        loss.backward();
        f = loss.item<double>();
      }
      soap.step();
    }
    return f;
  };
  const double last = run(false);
  const double adam = run(true);  // the same optimizer with Q = I: AdamW
  std::cout << "quadratic: initial " << initial << ", SOAP " << last << ", AdamW " << adam << "\n";
  EXPECT_LT(last, adam) << "preconditioning should beat AdamW on a Kronecker-structured quadratic";
  EXPECT_LT(last, 1e-4 * initial) << "initial " << initial << " final " << last;
}

TEST(Soap, EigenbasesStayOrthonormalAndDiagonaliseStationaryStatistics) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto g = at::detail::createCPUGenerator(5);
  auto W = torch::zeros({10, 7}, opts).requires_grad_();
  const auto G = torch::randn({10, 7}, g, opts);
  SoapOptions o;
  o.precondition_frequency = 1;
  o.lr = 1e-3;
  Soap soap({W}, o);
  for (int t = 0; t < 200; ++t) {
    W.mutable_grad() = G;  // stationary: L → G Gᵀ, R → Gᵀ G
    soap.step();
  }
  for (int side = 0; side < 2; ++side) {
    auto Q = soap.eigenbasis(0, side);
    ASSERT_TRUE(Q.defined());
    const int64_t n = Q.size(0);
    EXPECT_LT((Q.t().mm(Q) - torch::eye(n, opts)).norm().item<double>(), 1e-12) << "side " << side;
    // Power iteration on a fixed matrix: Q's leading columns become eigenvectors of the limit
    // statistics (the rank-7 part; L = G Gᵀ has a 3-dim nullspace on side 0).
    auto S = side == 0 ? G.mm(G.t()) : G.t().mm(G);
    auto lead = Q.narrow(1, 0, 7);
    auto SQ = S.mm(lead);
    auto ritz = (lead * SQ).sum(0);
    auto residual = (SQ - lead * ritz).norm().item<double>() / S.norm().item<double>();
    EXPECT_LT(residual, 1e-6) << "side " << side;
    // eigenvalue order: descending
    EXPECT_TRUE(torch::all(ritz.narrow(0, 0, 6) >= ritz.narrow(0, 1, 6)).item<bool>()) << ritz;
  }
}

// The 50-long side is left unpreconditioned (no Q_R: the identity) while the 4-long side is
// rotated: the second step is exactly Adam in Q_L's eigenbasis, computed here by hand. Q_L's
// column order and signs cancel in Q_L (Q_Lᵀ M ⊘ denom), so eigh's ascending order will do.
TEST(Soap, MaxPrecondDimLeavesLongSidesUnpreconditioned) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto g = at::detail::createCPUGenerator(9);
  const auto G1 = torch::randn({4, 50}, g, opts), G2 = torch::randn({4, 50}, g, opts);
  auto two_steps = [&](int64_t max_precond_dim) {
    auto W = torch::zeros({4, 50}, opts).requires_grad_();
    SoapOptions o;
    o.max_precond_dim = max_precond_dim;
    Soap soap({W}, o);
    W.mutable_grad() = G1;
    soap.step();
    EXPECT_TRUE(soap.eigenbasis(0, 0).defined());
    EXPECT_EQ(soap.eigenbasis(0, 1).defined(), max_precond_dim >= 50);
    EXPECT_TRUE(torch::equal(W.detach(), torch::zeros_like(W))) << "the first step only collects statistics";
    W.mutable_grad() = G2;
    soap.step();
    return W.detach().clone();
  };
  const SoapOptions o;  // lr, betas, eps; shampoo_beta < 0 means beta2; W = 0, so no decay term
  const auto L = (1 - o.beta2) * G1.mm(G1.t());
  const auto Q = std::get<1>(torch::linalg_eigh(L));
  const double bc1 = 1 - o.beta1, bc2 = 1 - o.beta2;  // t = 1
  const auto M = (1 - o.beta1) * G2;
  const auto V = (1 - o.beta2) * Q.t().mm(G2).pow(2);
  const auto want = -o.lr / bc1 * Q.mm(Q.t().mm(M) / ((V / bc2).sqrt() + o.eps));
  const auto got = two_steps(10);
  EXPECT_LT((got - want).norm().item<double>() / want.norm().item<double>(), 1e-12);
  // Negative control: preconditioning the long side as well is a different step.
  const auto both = two_steps(100);
  EXPECT_GT((both - want).norm().item<double>() / want.norm().item<double>(), 1e-3);
}

// pos_embed-like [1, n, d] is preconditioned as [n, d] (not [1, n·d], whose n·d × n·d statistics
// would cost O((nd)³) per refresh): the same trajectory as a [n, d] parameter. cls_token-like
// [1, 1, d] gets Adam: after its statistics-only first step, one bias-corrected Adam step,
// −lr·g/(|g| + ε).
TEST(Soap, LeadingUnitDimsAreDropped) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto g = at::detail::createCPUGenerator(13);
  auto pos = torch::zeros({1, 5, 4}, opts).requires_grad_();
  auto cls = torch::zeros({1, 1, 4}, opts).requires_grad_();
  auto flat = torch::zeros({5, 4}, opts).requires_grad_();
  SoapOptions o;
  o.precondition_frequency = 2;
  Soap soap({pos, cls}, o);
  Soap reference({flat}, o);
  torch::Tensor cls_grad;
  for (int t = 1; t <= 5; ++t) {
    const auto grad = torch::randn({5, 4}, g, opts);
    cls_grad = torch::randn({1, 1, 4}, g, opts);
    pos.mutable_grad() = grad.reshape({1, 5, 4});
    cls.mutable_grad() = cls_grad;
    flat.mutable_grad() = grad;
    soap.step();
    reference.step();
    if (t == 1) {
      ASSERT_TRUE(soap.eigenbasis(0, 0).defined());
      EXPECT_EQ(soap.eigenbasis(0, 0).sizes(), (std::vector<int64_t>{5, 5}));
      EXPECT_EQ(soap.eigenbasis(0, 1).sizes(), (std::vector<int64_t>{4, 4}));
      EXPECT_FALSE(soap.eigenbasis(1, 0).defined());
      EXPECT_FALSE(soap.eigenbasis(1, 1).defined());
    }
    if (t == 2) {
      const auto want = -o.lr * cls_grad / (cls_grad.abs() + o.eps);
      EXPECT_LT((cls.detach() - want).norm().item<double>() / want.norm().item<double>(), 1e-12);
    }
  }
  EXPECT_GT(flat.detach().norm().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(pos.detach().reshape({5, 4}), flat.detach()));
}

// The eigenbases are row-major in a live run (after the first eigh and after refreshes) and after
// a load, and the shapes whose rounding showed it, [16, 48] and [18, 6], continue bitwise after a
// round trip. eigh's column-major result, kept by the refresh's copy_, had made a resumed run take
// other BLAS transpose paths than the uninterrupted one (on some CPUs within 4 steps).
TEST(Soap, EigenbasesAreRowMajorLiveAndLoaded) {
  auto g = at::detail::createCPUGenerator(11);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  std::vector<torch::Tensor> a = {torch::randn({16, 48}, g, opts).requires_grad_(),
                                  torch::randn({18, 6}, g, opts).requires_grad_()};
  SoapOptions o;
  o.precondition_frequency = 2;
  Soap first(a, o);
  const auto expect_row_major = [&](const Soap& s, const char* when) {
    for (size_t i = 0; i < a.size(); ++i)
      for (int side = 0; side < 2; ++side) {
        const torch::Tensor q = s.eigenbasis(i, side);
        ASSERT_TRUE(q.defined()) << when << ": param " << i << " side " << side;
        EXPECT_TRUE(q.is_contiguous()) << when << ": param " << i << " side " << side << " strides " << q.strides();
      }
  };
  for (int64_t t = 1; t <= 2; ++t) {
    set_grads(a, t);
    first.step();
  }
  expect_row_major(first, "after the first eigh");
  for (int64_t t = 3; t <= 5; ++t) {
    set_grads(a, t);
    first.step();
  }
  expect_row_major(first, "after refreshes");
  std::vector<torch::Tensor> b;
  for (auto& p : a) b.push_back(p.detach().clone().requires_grad_());
  Soap second(b, o);
  load_state(first, second);
  expect_row_major(second, "after a load");
  for (int64_t t = 6; t <= 16; ++t) {
    set_grads(a, t);
    set_grads(b, t);
    first.step();
    second.step();
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].detach(), b[i].detach())) << "param " << i;
}

TEST(Soap, StateRoundTripContinuesIdentically) {
  auto a = make_params();
  SoapOptions o;
  o.precondition_frequency = 3;
  Soap first(a, o);
  for (int64_t t = 1; t <= 7; ++t) {
    set_grads(a, t);
    first.step();
  }
  std::vector<torch::Tensor> b;
  for (auto& p : a) b.push_back(p.detach().clone().requires_grad_());
  Soap second(b, o);
  load_state(first, second);
  std::vector<torch::Tensor> at_load;
  for (auto& p : a) at_load.push_back(p.detach().clone());
  for (int64_t t = 8; t <= 15; ++t) {
    set_grads(a, t);
    set_grads(b, t);
    first.step();
    second.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_FALSE(torch::equal(a[i].detach(), at_load[i])) << "param " << i << " did not move after the load";
    EXPECT_TRUE(torch::equal(a[i].detach(), b[i].detach())) << i;
  }
  // Negative control: a fresh optimizer (no state loaded) takes different steps.
  std::vector<torch::Tensor> c;
  for (auto& p : at_load) c.push_back(p.clone().requires_grad_());
  Soap fresh(c, o);
  for (int64_t t = 8; t <= 15; ++t) {
    set_grads(c, t);
    fresh.step();
  }
  EXPECT_FALSE(torch::equal(c[0].detach(), a[0].detach()));
}

// An independent SOAP for one parameter, written from soap.h's formulas: the paper's Algorithm 3
// as the official implementation (nikhilvyas/SOAP, soap.py) runs it, with soap.h's documented
// AdamW-style ε and decay placement. One parameter at a time, fp64, explicit matrix products,
// torch::linalg_eigh / torch::linalg_qr; nothing shared with soap.cpp. A parameter of two or more
// dims is a matrix [size(0), numel/size(0)] (a conv weight [o, i, p, q] is [o, i·p·q]), a 1-D one
// a vector that gets Adam; no leading size-1 dims (soap.cpp drops them) and no max_precond_dim
// (every side is preconditioned).
class ReferenceSoap {
 public:
  ReferenceSoap(torch::Tensor W, SoapOptions o, bool decay) : W_(std::move(W)), o_(o), decay_(decay) {
    if (o_.shampoo_beta < 0) o_.shampoo_beta = o_.beta2;  // the reference's default
  }
  const torch::Tensor& param() const { return W_; }
  /// Q_L (side 0) or Q_R (side 1); undefined for a vector.
  const torch::Tensor& basis(int side) const { return Q_[side]; }

  void step(const torch::Tensor& grad) {
    ++calls_;
    if (W_.dim() >= 2 && W_.numel() / W_.size(0) > 1) {
      step_matrix(grad.reshape({W_.size(0), -1}));
    } else {
      step_vector(grad);
    }
  }

 private:
  // Eigenvectors of the symmetric S as columns, ordered by descending eigenvalue.
  static torch::Tensor eigenvectors_descending(const torch::Tensor& S) {
    auto [values, vectors] = torch::linalg_eigh(S);
    return vectors.index_select(1, torch::argsort(values, /*dim=*/0, /*descending=*/true));
  }

  void step_matrix(const torch::Tensor& G) {
    const double b1 = o_.beta1, b2 = o_.beta2, bs = o_.shampoo_beta;
    if (calls_ == 1) {
      // First call: statistics only, no update.  L = (1−β_s) G Gᵀ,  R = (1−β_s) Gᵀ G (from zero),
      // Q_L, Q_R = their eigenvectors (eigh), descending eigenvalue.  M = V = 0.
      M_ = torch::zeros_like(G);
      V_ = torch::zeros_like(G);
      L_ = (1 - bs) * G.mm(G.t());
      R_ = (1 - bs) * G.t().mm(G);
      Q_[0] = eigenvectors_descending(L_);
      Q_[1] = eigenvectors_descending(R_);
      return;
    }
    const int64_t t = calls_ - 1;  // the update's step number: 1 at the second call
    const torch::Tensor& QL = Q_[0];
    const torch::Tensor& QR = Q_[1];
    // G' = Q_Lᵀ G Q_R: the gradient in the current eigenbasis.
    const torch::Tensor Gp = QL.t().mm(G).mm(QR);
    // M ← β₁ M + (1−β₁) G  (kept in parameter space);  V ← β₂ V + (1−β₂) G'∘G'  (eigenbasis).
    M_ = b1 * M_ + (1 - b1) * G;
    V_ = b2 * V_ + (1 - b2) * Gp * Gp;
    // Adam in the eigenbasis: M̂' = Q_Lᵀ M Q_R / (1−β₁ᵗ),  V̂ = V / (1−β₂ᵗ),  N' = M̂' / (sqrt(V̂) + ε).
    const torch::Tensor Mhat = QL.t().mm(M_).mm(QR) / (1 - std::pow(b1, static_cast<double>(t)));
    const torch::Tensor Vhat = V_ / (1 - std::pow(b2, static_cast<double>(t)));
    const torch::Tensor Np = Mhat / (Vhat.sqrt() + o_.eps);
    // W ← W (1 − lr·wd) − lr · Q_L N' Q_Rᵀ  (decay first, then the step rotated back).
    const torch::Tensor N = QL.mm(Np).mm(QR.t());
    W_ = (decay_ ? W_ * (1 - o_.lr * o_.weight_decay) : W_) - o_.lr * N.reshape(W_.sizes());
    // After the update (the current gradient never rotates its own step):
    // L ← β_s L + (1−β_s) G Gᵀ,  R ← β_s R + (1−β_s) Gᵀ G.
    L_ = bs * L_ + (1 - bs) * G.mm(G.t());
    R_ = bs * R_ + (1 - bs) * G.t().mm(G);
    // Every `precondition_frequency` updates, one power-iteration step per side, on this step's
    // statistics. For side s with statistics S and basis Q:
    //   λ̂ = diag(Qᵀ S Q)                 the current eigenvalue estimates
    //   π = argsort(λ̂, descending)
    //   V ← V with its side-s index permuted by π (V[π[i]] moves to i: each coordinate keeps its
    //       second moment; V is not rotated, M needs nothing: it lives in parameter space)
    //   Q ← qr(S Q[:, π]).Q
    if (t % o_.precondition_frequency == 0) {
      for (int side = 0; side < 2; ++side) {
        const torch::Tensor& S = side == 0 ? L_ : R_;
        const torch::Tensor Q = Q_[side];
        const torch::Tensor estimates = torch::diagonal(Q.t().mm(S).mm(Q));
        const torch::Tensor pi = torch::argsort(estimates, /*dim=*/0, /*descending=*/true);
        V_ = V_.index_select(side, pi);
        Q_[side] = std::get<0>(torch::linalg_qr(S.mm(Q.index_select(1, pi))));
      }
    }
  }

  // A vector: AdamW (decay first; ε after bias-correcting v) after a statistics-only first call.
  void step_vector(const torch::Tensor& g) {
    const double b1 = o_.beta1, b2 = o_.beta2;
    if (calls_ == 1) {
      M_ = torch::zeros_like(g);
      V_ = torch::zeros_like(g);
      return;
    }
    const int64_t t = calls_ - 1;
    M_ = b1 * M_ + (1 - b1) * g;
    V_ = b2 * V_ + (1 - b2) * g * g;
    const torch::Tensor mhat = M_ / (1 - std::pow(b1, static_cast<double>(t)));
    const torch::Tensor vhat = V_ / (1 - std::pow(b2, static_cast<double>(t)));
    W_ = (decay_ ? W_ * (1 - o_.lr * o_.weight_decay) : W_) - o_.lr * mhat / (vhat.sqrt() + o_.eps);
  }

  torch::Tensor W_;
  SoapOptions o_;
  bool decay_;
  int64_t calls_ = 0;
  torch::Tensor M_, V_, L_, R_, Q_[2];
};

// SOAP's refresh path against ReferenceSoap above: a square matrix, a conv weight [4, 2, 2, 1]
// (a [4, 4] view) and a bias without decay, eleven calls at precondition_frequency 3 (a
// statistics-only first call, ten updates, refreshes after updates 3, 6 and 9), with β₁, β₂, β_s
// all different, so a swapped β is seen. After every call the parameters agree within
// kRelTol of how far they have moved, and the eigenbases agree up to their columns' signs.
//
// Why square matrices: the first eigh is of L = (1−β_s) G Gᵀ from one gradient, of rank
// min(m, k). A rectangular [m, k] leaves an (m−k)-dimensional null space whose basis eigh picks
// arbitrarily (any rounding difference in L rotates it), and Adam's elementwise V is not invariant
// to that rotation: the trajectory itself would be basis-dependent. A square full-rank gradient
// makes L and R full-rank with distinct eigenvalues, so each basis is fixed up to column signs,
// and the order by both sides' descending eigenvalues. The signs cancel in every step
// (Q_L D … D Q_Lᵀ), in V (squares) and in the refresh: Householder QR's Q does not change when an
// input column flips sign. What is left is rounding: eigenvectors to ~eps·‖L‖/gap, the QR of the
// power iteration to ~eps·κ(S); seen here 5e-15 (parameters) and 4e-15 (bases), so 1e-10 leaves
// margin for other BLAS/LAPACK builds, while each change to the refresh tried in the reference
// (V not permuted, or rotated instead; no eigenvalue sort; eigh instead of power iteration; the
// refresh a step late or on the previous statistics; M kept in the eigenbasis without
// re-projection) moved the parameters by 1e-2 to 7e-1 of their displacement from update 4 on.
TEST(Soap, RefreshesMatchAnIndependentReference) {
  constexpr double kRelTol = 1e-10;    // ‖W_soap − W_ref‖ / ‖W_ref − W₀‖
  constexpr double kBasisTol = 1e-10;  // ‖|Q_refᵀ Q_soap| − I‖: equal up to column signs
  auto gen = at::detail::createCPUGenerator(41);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const std::vector<torch::Tensor> initial = {torch::randn({6, 6}, gen, opts), torch::randn({4, 2, 2, 1}, gen, opts),
                                              torch::randn({6}, gen, opts)};
  const std::vector<bool> decay = {true, true, false};
  const std::vector<bool> matrix = {true, true, false};
  SoapOptions o;
  o.lr = 1e-2;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.shampoo_beta = 0.8;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  o.precondition_frequency = 3;
  std::vector<torch::Tensor> ps;
  std::vector<ReferenceSoap> ref;
  for (size_t i = 0; i < initial.size(); ++i) {
    ps.push_back(initial[i].clone().requires_grad_());
    ref.emplace_back(initial[i].clone(), o, decay[i]);
  }
  Soap soap(ps, o, decay);
  std::vector<std::array<int, 2>> basis_changes(ps.size(), {0, 0});  // observed rewrites per side
  double worst = 0, worst_basis = 0;
  for (int64_t call = 1; call <= 11; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const int64_t t = call - 1;  // the update's step number
    set_grads(ps, call);
    std::vector<torch::Tensor> before[2];
    for (size_t i = 0; i < ps.size(); ++i)
      for (int side = 0; side < 2; ++side) {
        const auto q = soap.eigenbasis(i, side);
        before[side].push_back(q.defined() ? q.clone() : q);
      }
    soap.step();
    for (size_t i = 0; i < ps.size(); ++i) ref[i].step(ps[i].grad());
    const bool refresh = t > 0 && t % o.precondition_frequency == 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      SCOPED_TRACE("param " + std::to_string(i));
      const auto W = ps[i].detach(), W_ref = ref[i].param();
      if (call == 1) {  // statistics only
        EXPECT_TRUE(torch::equal(W, initial[i]));
        EXPECT_TRUE(torch::equal(W_ref, initial[i]));
      } else {
        const double moved = (W_ref - initial[i]).norm().item<double>();
        ASSERT_GT(moved, 0);
        const double err = (W - W_ref).norm().item<double>() / moved;
        worst = std::max(worst, err);
        EXPECT_LT(err, kRelTol);
      }
      for (int side = 0; side < 2; ++side) {
        const auto Q = soap.eigenbasis(i, side);
        ASSERT_EQ(Q.defined(), matrix[i]) << "side " << side;
        ASSERT_EQ(ref[i].basis(side).defined(), matrix[i]) << "side " << side;
        if (!matrix[i]) continue;
        const int64_t n = Q.size(0);
        const double basis_err =
            (ref[i].basis(side).t().mm(Q).abs() - torch::eye(n, opts)).norm().item<double>();
        worst_basis = std::max(worst_basis, basis_err);
        EXPECT_LT(basis_err, kBasisTol) << "side " << side;
        // The schedule: the basis is rewritten exactly at the refreshes, and kept bitwise between.
        if (call > 1) {
          const bool changed = !torch::equal(Q, before[side][i]);
          EXPECT_EQ(changed, refresh) << "side " << side;
          basis_changes[i][side] += changed ? 1 : 0;
        }
      }
    }
  }
  // Eleven calls at frequency 3: SOAP itself rewrote every matrix's two bases after updates 3, 6, 9.
  for (size_t i = 0; i < ps.size(); ++i)
    for (int side = 0; side < 2; ++side) EXPECT_EQ(basis_changes[i][side], matrix[i] ? 3 : 0) << "param " << i << " side " << side;
  std::cout << "SOAP against the reference over 3 refreshes: parameters within " << worst
            << " of their displacement, eigenbases within " << worst_basis << "\n";
}

TEST(Soap, LoadRejectsStateOfAnotherModel) {
  auto a = make_params();
  Soap first(a, SoapOptions{});
  auto W = torch::zeros({3, 3}).requires_grad_();
  Soap second({W}, SoapOptions{});
  EXPECT_THROW(load_state(first, second), std::invalid_argument);
  // As many parameters, other shapes: the moments (and eigenbases) are checked against each.
  auto V = torch::zeros({6, 5}, torch::kFloat64).requires_grad_();
  auto U = torch::zeros({5, 6}, torch::kFloat64).requires_grad_();
  Soap six_by_five({V}, SoapOptions{}), five_by_six({U}, SoapOptions{});
  for (int t = 1; t <= 2; ++t) {
    V.mutable_grad() = random_like_seeded(V, t);
    six_by_five.step();
  }
  try {
    load_state(six_by_five, five_by_six);
    ADD_FAILURE() << "a [6, 5] parameter's state loaded into a [5, 6] one";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 0"), std::string::npos) << e.what();
  }
}

TEST(Soap, RejectsBadOptions) {
  auto W = torch::zeros({3, 3}).requires_grad_();
  SoapOptions o;
  o.beta1 = 1.0;
  EXPECT_THROW(Soap({W}, o), std::invalid_argument);
  o = SoapOptions{};
  o.precondition_frequency = 0;
  EXPECT_THROW(Soap({W}, o), std::invalid_argument);
  o = SoapOptions{};
  o.shampoo_beta = 1.0;
  EXPECT_THROW(Soap({W}, o), std::invalid_argument);
  o = SoapOptions{};
  o.eps = 0;
  EXPECT_THROW(Soap({W}, o), std::invalid_argument);
  o = SoapOptions{};
  o.max_precond_dim = 0;
  EXPECT_THROW(Soap({W}, o), std::invalid_argument);
  EXPECT_NO_THROW(Soap({W}, SoapOptions{}));
}

}  // namespace
}  // namespace jacond
