// The LibTorch ViT (models/vit/vit.h): shapes, timm names through safetensors, the block Jacobian of
// every skip mode against LibTorch autograd on the same weights (the analysis composition
// K_ffn(X1)·K_sab(X), with ReZero's α folded in), structural facts the tracker must report, and
// one-line errors for bad states; drop path against timm's drop_path (per sample, 1/keep, rates
// linear in depth) and the whole-model `timm` initialisation against timm's init_weights rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "experiments/bench/aten_op_counter.h"
#include "models/track/bridge.h"
#include "models/track/conditioning.h"
#include "models/io/safetensors.h"
#include "models/vit/torch_block.h"
#include "models/vit/vit.h"
#include "support/random_block.h"
#include "support/tolerances.h"
#include "support/error_message.h"

namespace jacond {
namespace {

using models::SkipKind;
using models::ViTConfig;
using models::VisionTransformer;

ViTConfig small_config(SkipKind skip = SkipKind::kFull) {
  ViTConfig c;
  c.dim = 12;
  c.depth = 2;
  c.heads = 3;
  c.patch = 7;  // 4×4 grid + cls = 17 tokens
  c.skip = skip;
  c.init.seed = 11;
  return c;
}

TEST(ViT, ForwardShapesAndBlockInputs) {
  VisionTransformer model(small_config());
  auto x = torch::randn({3, 1, 28, 28});
  std::vector<torch::Tensor> inputs;
  auto logits = model->forward_with_block_inputs(x, inputs);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 10}));
  ASSERT_EQ(inputs.size(), 2u);
  for (const auto& t : inputs) EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 17, 12}));
  EXPECT_TRUE(torch::allclose(logits, model->forward(x)));
  EXPECT_NE(jacond::test::error_message([&] { model->forward(torch::randn({1, 3, 28, 28})); }).find("ViT expects images"), std::string::npos);
}

// The ATen operations of one forward (+ backward) pass by name, nested ones included
// (experiments/bench/aten_op_counter.h, the counter `bench train` compares the routes with).
cli::AtenOpCounter::Counts ops_of_a_training_pass(VisionTransformer& model, const torch::Tensor& images,
                                                  bool backward = true) {
  cli::AtenOpCounter counter;
  const torch::Tensor loss = torch::cross_entropy_loss(model->forward(images), torch::zeros({images.size(0)}, torch::kLong));
  if (backward) loss.backward();
  return counter.take();
}

// The attention splits qkv's output by one unbind, as the Python model does (`q, k, v = t`), so
// backward joins the three gradients by one stack: three selects would each write a zero tensor
// of qkv's whole size in backward (select_backward), and autograd would add the three, eight
// kernels a block on a GPU where stack is one (models/vit/vit.cpp, AttentionImpl::forward).
TEST(ViT, BackwardJoinsTheQkvGradientsByOneStackPerBlock) {
  VisionTransformer model(small_config());
  model->train();
  const cli::AtenOpCounter::Counts ops = ops_of_a_training_pass(model, torch::randn({2, 1, 28, 28}));
  const auto count = [&](const std::string& name) { return ops.count(name) ? ops.at(name) : 0; };
  EXPECT_EQ(count("aten::select_backward"), 1) << "the head's read-out of the cls token only (was 1 + 3 a block)";
  EXPECT_EQ(count("aten::unbind"), 2) << "one a block, depth 2";
  EXPECT_GE(count("aten::stack"), 2) << "UnbindBackward's stack, one a block";
}

// Each Linear on tokens [B, n, d] is one addmm with its bias folded in (at::linear, as Python's
// F.linear), not LibTorch C++'s matmul then `+= bias`, which is one kernel more a layer on a GPU
// (models/vit/vit.cpp, apply_linear). Four a block, and the head's; the forward pass alone.
TEST(ViT, ALayerOnTokensIsOneAddmmAsInPython) {
  VisionTransformer model(small_config());
  model->train();
  const cli::AtenOpCounter::Counts ops = ops_of_a_training_pass(model, torch::randn({2, 1, 28, 28}), false);
  const auto count = [&](const std::string& name) { return ops.count(name) ? ops.at(name) : 0; };
  EXPECT_EQ(count("aten::addmm"), 4 * 2 + 1);
  EXPECT_EQ(count("aten::add_"), 0) << "no bias added after a matmul";
}

TEST(ViT, TimmNamesRoundTripThroughSafetensors) {
  VisionTransformer model(small_config());
  const auto state = model->state();
  std::set<std::string> names;
  for (const auto& kv : state) names.insert(kv.first);
  for (const char* key : {"patch_embed.proj.weight", "patch_embed.proj.bias", "cls_token", "pos_embed",
                          "blocks.0.norm1.weight", "blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias",
                          "blocks.0.attn.proj.weight", "blocks.1.mlp.fc1.weight", "blocks.1.mlp.fc2.bias",
                          "blocks.1.norm2.bias", "norm.weight", "head.weight", "head.bias"})
    EXPECT_TRUE(names.count(key)) << key;
  EXPECT_EQ(state.at("blocks.0.attn.qkv.weight").sizes(), (std::vector<int64_t>{36, 12}));
  EXPECT_EQ(state.at("pos_embed").sizes(), (std::vector<int64_t>{1, 17, 12}));

  const auto path = (std::filesystem::temp_directory_path() / "jacond_vit_roundtrip.safetensors").string();
  models::save_safetensors(path, state);
  ViTConfig other = small_config();
  other.init.seed = 99;  // different weights until loaded
  VisionTransformer copy(other);
  auto x = torch::randn({2, 1, 28, 28});
  EXPECT_FALSE(torch::equal(copy->forward(x), model->forward(x)));
  copy->load_state(models::load_safetensors(path));
  EXPECT_TRUE(torch::equal(copy->forward(x), model->forward(x)));
  const ViTConfig inferred = models::infer_config(models::load_safetensors(path), ViTConfig{});
  EXPECT_EQ(inferred.dim, 12);
  EXPECT_EQ(inferred.depth, 2);
  EXPECT_EQ(inferred.patch, 7);
  EXPECT_EQ(inferred.image_size, 28);
  EXPECT_EQ(inferred.num_classes, 10);
  EXPECT_DOUBLE_EQ(inferred.mlp_ratio, 4.0);
  std::filesystem::remove(path);
}

// A model in fp64 whose block 0 has generic weights (non-zero biases, non-unit LN affine).
VisionTransformer generic_fp64_model(SkipKind skip, double a1 = 0.3, double a2 = -0.7) {
  VisionTransformer model(small_config(skip));
  model->to(torch::kFloat64);
  auto state = model->state();
  models::block_to_timm(test::random_block(12, 3, 48, 5), 0, state);
  if (skip == SkipKind::kRezero) {
    state["blocks.0.rezero_attn"] = torch::full({1}, a1, torch::kFloat64);
    state["blocks.0.rezero_mlp"] = torch::full({1}, a2, torch::kFloat64);
  }
  model->load_state(state);
  return model;
}

// Jacobian of block 0 by the analysis composition K_ffn(X1) · K_sab(X).
Mat analysis_block_jacobian(const models::TensorMap& state, const ViTConfig& cfg, const Mat& X) {
  SkipMode mode;
  const BlockWeights w = models::analysis_block(state, cfg, 0, &mode);
  const BlockForward f = block_forward(w, X, mode);
  return ffn_jacobian(w, f).to_dense() * sab_jacobian(w, f);
}

class BlockJacobianBySkip : public ::testing::TestWithParam<SkipKind> {};

TEST_P(BlockJacobianBySkip, MatchesAutograd) {
  const SkipKind skip = GetParam();
  VisionTransformer model = generic_fp64_model(skip);
  const Mat X = test::gaussian(17, 12, 1.0, *std::make_unique<std::mt19937_64>(3));
  auto block = model->blocks[0]->as<models::BlockImpl>();
  model->eval();
  const Mat J_autograd = models::torch_jacobian(
      [&](const at::Tensor& x) { return block->forward(x.unsqueeze(0)).squeeze(0); }, X);
  const Mat J = analysis_block_jacobian(model->state(), model->config(), X);
  EXPECT_LT(test::rel_error(J, J_autograd), test::kVsAutograd) << models::to_string(skip);
  // Forward values agree too (analysis block_forward vs the torch block).
  SkipMode mode;
  const BlockWeights w = models::analysis_block(model->state(), model->config(), 0, &mode);
  const Mat Y = models::to_eigen(block->forward(models::to_torch(X).unsqueeze(0)).squeeze(0));
  EXPECT_LT(test::rel_error(block_forward(w, X, mode).X2, Y), 1e-13);
}

INSTANTIATE_TEST_SUITE_P(AllSkipModes, BlockJacobianBySkip, ::testing::ValuesIn(models::kSkipKinds),
                         [](const auto& info) {
                           std::string name = models::to_string(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');  // test names: letters, digits, '_'
                           return name;
                         });

TEST(ViT, RezeroWithoutFoldingAlphaIsRejectedByTheSameComparison) {
  VisionTransformer model = generic_fp64_model(SkipKind::kRezero);
  const Mat X = test::gaussian(17, 12, 1.0, *std::make_unique<std::mt19937_64>(4));
  auto block = model->blocks[0]->as<models::BlockImpl>();
  const Mat J_autograd = models::torch_jacobian(
      [&](const at::Tensor& x) { return block->forward(x.unsqueeze(0)).squeeze(0); }, X);
  // The state without its α (block_from_timm folds rezero_attn/mlp wherever they are) read as a
  // plain full residual: the α scaling is missing, and the comparison says so.
  models::TensorMap raw = model->state();
  ASSERT_EQ(raw.erase("blocks.0.rezero_attn") + raw.erase("blocks.0.rezero_mlp"), 2u);
  ViTConfig full = model->config();
  full.skip = SkipKind::kFull;
  const Mat wrong = analysis_block_jacobian(raw, full, X);
  EXPECT_GT(test::rel_error(wrong, J_autograd), 1e-2);
  // ... and a rezero config whose state lacks α is refused, not read as α = 1.
  ViTConfig rezero = model->config();
  EXPECT_THROW(models::analysis_block(raw, rezero, 0), std::invalid_argument);
}

// The model's own forward, same weights, a branch zeroed so the other one is alone: dropping
// one residual (full vs ffn: the attention's; full vs sab: the MLP's) changes the block
// Jacobian by exactly I.
TEST(ViT, EachResidualAddsTheIdentity) {
  const Mat X = test::gaussian(17, 12, 1.0, *std::make_unique<std::mt19937_64>(8));
  auto jacobian = [&](SkipKind skip, const char* zeroed) {
    VisionTransformer m = generic_fp64_model(skip);
    m->eval();
    auto b = m->blocks[0]->as<models::BlockImpl>();
    torch::nn::Linear out = std::string(zeroed) == "mlp" ? b->mlp->fc2 : b->attn->proj;
    {
      torch::NoGradGuard no_grad;
      out->weight.zero_();
      out->bias.zero_();
    }
    return models::torch_jacobian([&](const at::Tensor& x) { return b->forward(x.unsqueeze(0)).squeeze(0); }, X);
  };
  const Mat I = Mat::Identity(17 * 12, 17 * 12);
  const Mat attn_residual = jacobian(SkipKind::kFull, "mlp") - jacobian(SkipKind::kFfn, "mlp");
  EXPECT_LT((attn_residual - I).norm(), 1e-12) << "full - ffn, MLP zeroed";
  const Mat mlp_residual = jacobian(SkipKind::kFull, "attn") - jacobian(SkipKind::kSab, "attn");
  EXPECT_LT((mlp_residual - I).norm(), 1e-12) << "full - sab, attention zeroed";
}

// The model's skip kinds are the analysis's skip modes, same spellings, plus ReZero (analysed
// as full): one mapping, one parser per spelling, errors listing the valid names.
TEST(ViT, SkipKindsMapOntoTheAnalysisSkipModes) {
  std::set<std::string> names;
  for (SkipKind k : models::kSkipKinds) {
    SCOPED_TRACE(models::to_string(k));
    names.insert(models::to_string(k));
    EXPECT_EQ(models::parse_skip_kind(models::to_string(k)), k);
    if (k == SkipKind::kRezero) {
      EXPECT_EQ(models::analysis_skip_mode(k), SkipMode::kFull);
      EXPECT_THROW(parse_skip_mode("rezero"), std::invalid_argument);
    } else {
      EXPECT_EQ(models::analysis_skip_mode(k), parse_skip_mode(models::to_string(k)));
      EXPECT_EQ(to_string(models::analysis_skip_mode(k)), models::to_string(k));
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"none", "full", "no-ffn-skip", "no-sab-skip", "rezero"}));
  // The earlier spellings name the residual kept: "sab" keeps the attention's (no FFN skip).
  EXPECT_EQ(jacond::models::parse_skip_kind("sab"), jacond::models::SkipKind::kSab);
  EXPECT_EQ(jacond::models::parse_skip_kind("ffn"), jacond::models::SkipKind::kFfn);
  EXPECT_EQ(jacond::models::to_string(jacond::models::SkipKind::kSab), "no-ffn-skip");
  EXPECT_EQ(jacond::test::error_message([] { models::parse_skip_kind("skip"); }),
            "unknown skip mode 'skip' (valid: none | full | no-ffn-skip | no-sab-skip | rezero)");
  EXPECT_EQ(jacond::test::error_message([] { parse_skip_mode("rezero"); }), "unknown skip mode 'rezero' (valid: none | full | no-ffn-skip | no-sab-skip)");
}

TEST(ViT, RezeroAtInitIsTheIdentityAndTheTrackerSaysSo) {
  VisionTransformer model(small_config(SkipKind::kRezero));
  auto x = torch::randn({1, 1, 28, 28});
  std::vector<torch::Tensor> inputs;
  model->forward_with_block_inputs(x, inputs);
  // ReZero's α = 0: the block returns x + 0·branch(x), bitwise x (inputs[1] is block 0's output).
  EXPECT_TRUE(torch::equal(inputs[1], inputs[0]));
  EXPECT_FALSE(torch::equal(inputs[0], torch::zeros_like(inputs[0])));
  models::TrackOptions opt;
  opt.matrices = {"K_sab", "K_ffn"};
  const auto reports = models::track_conditioning(model, x, opt);
  ASSERT_EQ(reports.size(), 4u);  // 2 layers × {K_sab, K_ffn}
  for (const auto& r : reports) {
    EXPECT_NEAR(r.report.kappa, 1.0, 1e-12) << r.report.matrix << " layer " << r.layer;
    EXPECT_NEAR(r.report.sigma_max, 1.0, 1e-12);
  }
}

// The tracking forward runs in eval mode; when it throws, the model is back in training mode all
// the same: the trainer catches a tracking failure (a CUDA OOM, retried on the host) and trains
// on, which it did in eval mode (drop path off) when only a normal return restored the mode.
TEST(ViT, ATrackingForwardThatThrowsLeavesTheModelTraining) {
  VisionTransformer model(small_config());
  model->train();
  models::TrackOptions opt;
  opt.matrices = {"K_sab"};
  // A 3-channel probe: the patch embedding takes one channel.
  EXPECT_NE(jacond::test::error_message([&] { models::track_conditioning(model, torch::randn({1, 3, 28, 28}), opt); }), "");
  EXPECT_TRUE(model->is_training());
  for (const auto& m : model->modules()) EXPECT_TRUE(m->is_training()) << m->name();
}

TEST(ViT, SkiplessTrackerReportsTheLayerNormNullspace) {
  VisionTransformer model(small_config(SkipKind::kNone));
  models::TrackOptions opt;
  opt.matrices = {"K_sab"};
  const auto reports = models::track_conditioning(model, torch::randn({2, 1, 28, 28}), opt);
  ASSERT_EQ(reports.size(), 8u);  // 2 probes × 2 layers × {full, ln-complement}
  for (const auto& r : reports) {
    if (r.report.space == "full") EXPECT_EQ(r.report.status, Status::kSingular);
    else EXPECT_EQ(r.report.status, Status::kExact);
  }
}

TEST(ViT, OursInitGivesOrthogonalValueOutputProduct) {
  ViTConfig c = small_config(SkipKind::kNone);
  c.init = models::InitConfig::for_scheme(models::InitScheme::kOurs, 3);
  VisionTransformer ours(c);
  int seen = 0;
  for (const auto& r : models::data_free_conditioning(ours->state(), c)) {
    if (r.report.matrix != "W_VO") continue;
    ++seen;
    EXPECT_NEAR(r.report.kappa, 1.0, 1e-5) << "layer " << r.layer;  // fp32 weights: W^V W^O = c² U Vᵀ
    EXPECT_NEAR(r.report.sigma_max, c.init.c * c.init.c, 1e-4) << "layer " << r.layer;
  }
  EXPECT_EQ(seen, c.depth);
  VisionTransformer timm(small_config(SkipKind::kNone));
  seen = 0;
  for (const auto& r : models::data_free_conditioning(timm->state(), small_config())) {
    if (r.report.matrix != "W_VO") continue;
    ++seen;
    EXPECT_GT(r.report.kappa, 10.0) << "layer " << r.layer;
  }
  EXPECT_EQ(seen, c.depth);
}

TEST(ViT, LoadStateErrorsNameTheKey) {
  VisionTransformer model(small_config());
  auto state = model->state();
  auto missing = state;
  missing.erase("blocks.1.mlp.fc1.bias");
  EXPECT_EQ(jacond::test::error_message([&] { model->load_state(missing); }), "model state: missing tensor 'blocks.1.mlp.fc1.bias'");
  auto shaped = state;
  shaped["head.weight"] = torch::zeros({3, 12});
  EXPECT_NE(jacond::test::error_message([&] { model->load_state(shaped); }).find("'head.weight' has shape [3, 12], expected [10, 12]"),
            std::string::npos);
  auto nan = state;
  nan["blocks.0.attn.proj.weight"] = state["blocks.0.attn.proj.weight"].clone();
  nan["blocks.0.attn.proj.weight"][0][0] = NAN;
  EXPECT_EQ(jacond::test::error_message([&] { model->load_state(nan); }), "model state: 'blocks.0.attn.proj.weight' contains NaN or inf");
  auto extra = state;
  extra["blocks.2.norm1.weight"] = torch::ones({12});
  EXPECT_NE(jacond::test::error_message([&] { model->load_state(extra); }).find("unexpected tensor 'blocks.2.norm1.weight'"), std::string::npos);
}

TEST(ViT, ConfigValidationAndJson) {
  ViTConfig c = small_config(SkipKind::kFfn);
  c.norm = models::NormPlacement::kPost;
  c.drop_path = 0.25;
  c.init = models::InitConfig::for_scheme(models::InitScheme::kOurs, 5);
  c.init.beta = 0.125;
  const ViTConfig back = ViTConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  // Not only the JSON: the fields themselves came back.
  EXPECT_EQ(back.dim, 12);
  EXPECT_EQ(back.heads, 3);
  EXPECT_EQ(back.patch, 7);
  EXPECT_EQ(back.skip, SkipKind::kFfn);
  EXPECT_EQ(back.norm, models::NormPlacement::kPost);
  EXPECT_EQ(back.drop_path, 0.25);
  EXPECT_EQ(back.init.scheme, models::InitScheme::kOurs);
  EXPECT_EQ(back.init.mlp, models::MlpInit::kDks);
  EXPECT_EQ(back.init.beta, 0.125);
  EXPECT_EQ(back.init.seed, 5u);
  for (SkipKind k : models::kSkipKinds) {
    c.skip = k;
    EXPECT_EQ(ViTConfig::from_json(c.to_json()).skip, k) << models::to_string(k);
  }
  c.patch = 5;
  EXPECT_NE(jacond::test::error_message([&] { c.validate(); }).find("--patch 5 does not divide the image size 28"), std::string::npos);
}

TEST(ViT, PostNormForwardRuns) {
  ViTConfig c = small_config(SkipKind::kFull);
  c.norm = models::NormPlacement::kPost;
  VisionTransformer model(c);
  models::TrackOptions opt;
  const auto reports = models::track_conditioning(model, torch::randn({1, 1, 28, 28}), opt);
  std::set<std::string> names;
  for (const auto& r : reports) names.insert(r.report.matrix);
  EXPECT_EQ(names, (std::set<std::string>{"K_sa", "B_sa", "E_sa", "softmax", "attention"}));
  opt.matrices = {"K_sa", "K_ffn"};  // a post-norm block has no LayerNorm before its MLP
  EXPECT_NE(jacond::test::error_message([&] { models::track_conditioning(model, torch::randn({1, 1, 28, 28}), opt); })
                .find("not K_ffn"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Drop path (stochastic depth) against its definition, timm's drop_path(x, p, training,
// scale_by_keep=True): each sample's residual branch is kept with probability keep = 1 − p and
// then scaled by 1/keep, or dropped (zeroed), independently per sample and per branch, in
// training mode only; the rate of block l is drop_path · l / (depth − 1) (timm's
// torch.linspace(0, drop_path, depth)), 0 for depth 1 and for a skipless model.

// A model in fp64 whose every block has generic weights (O(1) branch outputs, so a kept, a
// dropped and an unscaled branch differ by O(1), far above the rounding tolerance).
VisionTransformer all_blocks_generic_fp64(const ViTConfig& cfg) {
  VisionTransformer model(cfg);
  model->to(torch::kFloat64);
  auto state = model->state();
  for (int64_t l = 0; l < cfg.depth; ++l)
    models::block_to_timm(test::random_block(cfg.dim, cfg.heads, cfg.hidden(), 40 + static_cast<uint64_t>(l)), l, state);
  model->load_state(state);
  return model;
}

// Per sample: which of the hand-computed candidates the block output is.
struct DropPathDraws {
  int64_t samples = 0, unmatched = 0, ambiguous = 0;
  int64_t attn_kept = 0, mlp_kept = 0, both_kept = 0;
  std::set<std::pair<bool, bool>> combos;  // (attention kept, MLP kept) seen
};

// The candidates, by hand from the block's submodules (pre-norm):
//   x1 = [x +] s_a · attn(norm1(x)),   y = [x1 +] s_m · mlp(norm2(x1)),
// where a residual branch's s is 1/keep (kept) or 0 (dropped) and a non-residual branch's s is
// 1 (drop path never touches it). A sample matches a candidate when the max abs difference over
// its [n, d] slice is below kSameMathRounding relative to the output's max abs: the same
// arithmetic in another order (fp64), while distinct candidates differ by O(1).
DropPathDraws classify_drop_path(models::BlockImpl& block, const torch::Tensor& x, const torch::Tensor& y, double keep,
                                 bool res_attn, bool res_mlp) {
  torch::NoGradGuard no_grad;
  DropPathDraws out;
  out.samples = x.size(0);
  const torch::Tensor a = block.attn->forward(block.norm1->forward(x));
  const torch::Tensor scale_y = y.abs().amax({1, 2});
  std::vector<std::pair<std::pair<bool, bool>, torch::Tensor>> errors;  // (kept flags, per-sample error [B])
  for (bool ka : {true, false}) {
    if (!res_attn && !ka) continue;
    const double sa = res_attn ? (ka ? 1.0 / keep : 0.0) : 1.0;
    const torch::Tensor x1 = res_attn ? x + a * sa : a * sa;
    const torch::Tensor m = block.mlp->forward(block.norm2->forward(x1));
    for (bool km : {true, false}) {
      if (!res_mlp && !km) continue;
      const double sm = res_mlp ? (km ? 1.0 / keep : 0.0) : 1.0;
      const torch::Tensor cand = res_mlp ? x1 + m * sm : m * sm;
      errors.push_back({{ka, km}, ((cand - y).abs().amax({1, 2}) / scale_y).contiguous()});
    }
  }
  for (int64_t i = 0; i < out.samples; ++i) {
    int matches = 0;
    std::pair<bool, bool> which;
    for (const auto& [flags, err] : errors)
      if (err.data_ptr<double>()[i] < test::kSameMathRounding) {
        ++matches;
        which = flags;
      }
    if (matches == 0) ++out.unmatched;
    if (matches > 1) ++out.ambiguous;
    if (matches != 1) continue;
    out.combos.insert(which);
    out.attn_kept += which.first;
    out.mlp_kept += which.second;
    out.both_kept += which.first && which.second;
  }
  return out;
}

// A count of n Bernoulli(p) trials lies within 5 binomial standard deviations of n·p (a normal
// tail of 6e-7; the seeds are fixed, so the outcome is deterministic, and a rate off by the
// amounts tested below moves the mean by > 10 standard deviations).
void expect_binomial(int64_t count, int64_t n, double p, const std::string& what) {
  const double sd = std::sqrt(n * p * (1.0 - p));
  EXPECT_LE(std::abs(static_cast<double>(count) - n * p), 5.0 * sd)
      << what << ": " << count << " of " << n << ", expected p = " << p;
}

// The no-drop output, by hand: x1 = x + attn(norm1 x), y = x1 + mlp(norm2 x1) (pre-norm, full).
torch::Tensor no_drop_output(models::BlockImpl& block, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x1 = x + block.attn->forward(block.norm1->forward(x));
  return x1 + block.mlp->forward(block.norm2->forward(x1));
}

double max_rel_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

constexpr int64_t kDropPathSamples = 400;

TEST(ViTDropPath, EachSampleKeepsOrDropsEachResidualBranchScaledByOneOverKeep) {
  ViTConfig cfg = small_config(SkipKind::kFull);
  cfg.drop_path = 0.4;  // depth 2: block 1's rate is the maximum, 0.4
  VisionTransformer model = all_blocks_generic_fp64(cfg);
  auto block = model->blocks[1]->as<models::BlockImpl>();
  const double keep = 1.0 - 0.4;
  torch::manual_seed(2024);
  const torch::Tensor x = torch::randn({kDropPathSamples, 17, 12}, torch::kFloat64);
  model->train();
  torch::Tensor y;
  {
    torch::NoGradGuard no_grad;
    y = block->forward(x);
  }
  const DropPathDraws d = classify_drop_path(*block, x, y, keep, true, true);
  EXPECT_EQ(d.unmatched, 0) << "samples that are none of the four kept/dropped combinations";
  EXPECT_EQ(d.ambiguous, 0);
  // Per sample, not per batch: all four combinations occur (each has probability ≥ 0.16, so
  // one is absent from 400 samples with probability ≤ 0.84^400 ≈ 1e-30).
  EXPECT_EQ(d.combos.size(), 4u);
  expect_binomial(d.attn_kept, d.samples, keep, "attention branches kept");
  expect_binomial(d.mlp_kept, d.samples, keep, "MLP branches kept");
  expect_binomial(d.both_kept, d.samples, keep * keep, "both kept (independent draws)");
  // Eval mode: no drop, no scaling.
  model->eval();
  torch::Tensor y_eval;
  {
    torch::NoGradGuard no_grad;
    y_eval = block->forward(x);
  }
  EXPECT_LT(max_rel_diff(y_eval, no_drop_output(*block, x)), test::kSameMathRounding);
}

TEST(ViTDropPath, RatesAreLinearInDepthResidualOnlyAndZeroWithoutSkips) {
  ViTConfig cfg = small_config(SkipKind::kFull);
  cfg.depth = 3;
  cfg.drop_path = 0.5;  // rates 0, 0.25, 0.5
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({kDropPathSamples, 17, 12}, torch::kFloat64);
  auto train_output = [&](VisionTransformer& model, int64_t l) {
    torch::NoGradGuard no_grad;
    model->train();
    torch::manual_seed(100 + l);
    return model->blocks[l]->as<models::BlockImpl>()->forward(x);
  };
  auto eval_output = [&](VisionTransformer& model, int64_t l) {
    torch::NoGradGuard no_grad;
    model->eval();
    return model->blocks[l]->as<models::BlockImpl>()->forward(x);
  };
  {
    VisionTransformer model = all_blocks_generic_fp64(cfg);
    for (int64_t l = 0; l < cfg.depth; ++l) {
      SCOPED_TRACE("full, layer " + std::to_string(l));
      const double rate = cfg.drop_path * static_cast<double>(l) / static_cast<double>(cfg.depth - 1);
      const double keep = 1.0 - rate;
      const torch::Tensor y = train_output(model, l);
      const DropPathDraws d = classify_drop_path(*model->blocks[l]->as<models::BlockImpl>(), x, y, keep, true, true);
      EXPECT_EQ(d.unmatched, 0);
      EXPECT_EQ(d.ambiguous, 0);
      if (l == 0) {  // rate 0: never drops, the training output is the eval output
        EXPECT_EQ(d.attn_kept, d.samples);
        EXPECT_EQ(d.mlp_kept, d.samples);
        EXPECT_LT(max_rel_diff(y, eval_output(model, l)), test::kSameMathRounding);
      } else {
        expect_binomial(d.attn_kept, d.samples, keep, "attention branches kept");
        expect_binomial(d.mlp_kept, d.samples, keep, "MLP branches kept");
      }
    }
  }
  // Residual branches only: in a sab layout (attention residual, MLP not) the MLP branch is
  // never dropped nor scaled, and in an ffn layout the attention branch; the residual one drops
  // at the layer's rate (last layer: 0.5).
  for (auto [skip, res_attn, res_mlp] : {std::tuple{SkipKind::kSab, true, false}, std::tuple{SkipKind::kFfn, false, true}}) {
    SCOPED_TRACE(models::to_string(skip));
    ViTConfig c = cfg;
    c.skip = skip;
    VisionTransformer model = all_blocks_generic_fp64(c);
    const int64_t l = c.depth - 1;
    const DropPathDraws d =
        classify_drop_path(*model->blocks[l]->as<models::BlockImpl>(), x, train_output(model, l), 0.5, res_attn, res_mlp);
    EXPECT_EQ(d.unmatched, 0);
    EXPECT_EQ(d.ambiguous, 0);
    expect_binomial(res_attn ? d.attn_kept : d.mlp_kept, d.samples, 0.5, "residual branches kept");
    EXPECT_EQ(res_attn ? d.mlp_kept : d.attn_kept, d.samples) << "the non-residual branch is always kept, unscaled";
  }
  // Skip none (no residual branch anywhere) and depth 1 (rate 0): training is eval.
  ViTConfig none = cfg;
  none.skip = SkipKind::kNone;
  ViTConfig one = cfg;
  one.depth = 1;
  for (const ViTConfig& c : {none, one}) {
    VisionTransformer model = all_blocks_generic_fp64(c);
    for (int64_t l = 0; l < c.depth; ++l)
      EXPECT_TRUE(torch::equal(train_output(model, l), eval_output(model, l)))
          << models::to_string(c.skip) << " depth " << c.depth << " layer " << l;
  }
}

// ---------------------------------------------------------------------------------------------
// The whole-model `timm` initialisation (VisionTransformerImpl::reset_parameters with init_block,
// vit.h's header comment) against timm's VisionTransformer.init_weights(''):
//   Linear weights (qkv, proj, fc1, fc2, head) trunc_normal_(std=.02) (timm's a=−2, b=2 are
//   absolute: ±100σ, in effect untruncated), Linear biases 0; pos_embed trunc_normal_(std=.02);
//   cls_token normal_(std=1e-6); LayerNorms weight 1, bias 0; patch_embed.proj a Conv2d, which
//   timm's init leaves at PyTorch's default: kaiming_uniform_(a=√5), i.e. U(±1/√fan_in), and bias
//   U(±1/√fan_in), fan_in = C·p².
//
// Bounds. For m iid draws of variance σ² and kurtosis κ, Var(s²/σ²) ≈ (κ−1)/m, so the sample std
// has s/σ − 1 ≈ ½(s²/σ² − 1) with standard deviation sqrt((κ−1)/(4m)): 1/sqrt(2m) for a normal
// (κ = 3; the ±100σ cut changes nothing measurable) and sqrt(1/(5m)) for a uniform (κ = 9/5).
// The sample mean has standard deviation σ/√m. Each check allows 5 such standard deviations
// (normal tail 6e-7), with a fixed seed, so the test is deterministic. The widest bound, the
// 96-entry cls_token's, is 5/sqrt(2·96) = 36% relative; the trunc_normal tensors (≥ 1632 entries)
// get ≤ 8.8%, so a std off by 50% (0.03 for 0.02) fails every one of them.
//
// Truncation. Every trunc_normal entry lies in [−2, 2] (the absolute cut). That the cut is in
// absolute units, not ±2σ: the fraction of entries with |w| > 2σ is 2(1 − Φ(2)) = 0.0455 for an
// (in effect) untruncated normal and exactly 0 for a cut at ±2σ (or a uniform of std σ), checked
// to 5 binomial standard deviations.
TEST(ViTInit, TimmModelInitFollowsTimmsRules) {
  ViTConfig cfg = small_config(SkipKind::kFull);
  cfg.dim = 96;           // tensors large enough for tight bounds; still fast
  cfg.num_classes = 100;  // head [100, 96]
  cfg.init = models::InitConfig::for_scheme(models::InitScheme::kTimm, 5);
  VisionTransformer model(cfg);
  models::TensorMap state = model->state();
  for (auto& [key, t] : state) t = t.to(torch::kFloat64);
  const int64_t d = cfg.dim;
  constexpr double kTimmStd = 0.02;
  const double two_sigma_tail = std::erfc(2.0 / std::sqrt(2.0));  // P(|Z| > 2) = 0.0455

  auto expect_std_and_mean = [](const torch::Tensor& t, double sigma, double kurtosis, const std::string& key) {
    const double m = static_cast<double>(t.numel());
    EXPECT_NEAR(t.std().item<double>() / sigma, 1.0, 5.0 * std::sqrt((kurtosis - 1.0) / (4.0 * m))) << key;
    EXPECT_NEAR(t.mean().item<double>(), 0.0, 5.0 * sigma / std::sqrt(m)) << key;
  };
  auto expect_timm_normal = [&](const std::string& key, std::vector<int64_t> shape) {
    SCOPED_TRACE(key);
    const torch::Tensor& t = state.at(key);
    ASSERT_EQ(t.sizes(), shape);
    expect_std_and_mean(t, kTimmStd, 3.0, key);
    EXPECT_LE(t.abs().max().item<double>(), 2.0) << "timm's absolute cut a = −2, b = 2";
    const int64_t beyond = (t.abs() > 2.0 * kTimmStd).sum().item<int64_t>();
    expect_binomial(beyond, t.numel(), two_sigma_tail, "entries beyond 2σ (a ±2σ cut would give none)");
  };
  auto expect_constant = [&](const std::string& key, double value) {
    const torch::Tensor& t = state.at(key);
    EXPECT_TRUE(torch::equal(t, torch::full_like(t, value))) << key << " should be all " << value;
  };

  // Blocks: Linear weights trunc_normal(0.02), biases 0, LayerNorms 1 / 0.
  for (int64_t l = 0; l < cfg.depth; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    expect_timm_normal(p + "attn.qkv.weight", {3 * d, d});
    expect_timm_normal(p + "attn.proj.weight", {d, d});
    expect_timm_normal(p + "mlp.fc1.weight", {cfg.hidden(), d});
    expect_timm_normal(p + "mlp.fc2.weight", {d, cfg.hidden()});
    for (const char* bias : {"attn.qkv.bias", "attn.proj.bias", "mlp.fc1.bias", "mlp.fc2.bias", "norm1.bias", "norm2.bias"})
      expect_constant(p + bias, 0.0);
    for (const char* weight : {"norm1.weight", "norm2.weight"}) expect_constant(p + weight, 1.0);
  }
  // Head, final norm, position embedding.
  expect_timm_normal("head.weight", {cfg.num_classes, d});
  expect_constant("head.bias", 0.0);
  expect_constant("norm.weight", 1.0);
  expect_constant("norm.bias", 0.0);
  expect_timm_normal("pos_embed", {1, cfg.tokens(), d});
  // cls_token ~ N(0, (1e-6)²), untruncated: 96 draws, std within 5/sqrt(2·96) = 36% relative.
  {
    const torch::Tensor& cls = state.at("cls_token");
    ASSERT_EQ(cls.sizes(), (std::vector<int64_t>{1, 1, d}));
    expect_std_and_mean(cls, 1e-6, 3.0, "cls_token");
  }
  // Patch embedding: PyTorch's Conv2d default, U(±1/√fan_in) for weight and bias. Every entry
  // within the bound (float32 storage: one part in 1e6 of slack), the largest within 1% of it
  // (P(all m = 4704 weights below 0.99·bound) = 0.99^4704 ≈ 3e-21), std bound/√3 (uniform κ = 9/5).
  {
    const double bound = 1.0 / std::sqrt(static_cast<double>(cfg.in_chans * cfg.patch * cfg.patch));
    for (const char* key : {"patch_embed.proj.weight", "patch_embed.proj.bias"}) {
      const torch::Tensor& t = state.at(key);
      const double max_abs = t.abs().max().item<double>();
      EXPECT_LE(max_abs, bound * (1.0 + 1e-6)) << key;
      expect_std_and_mean(t, bound / std::sqrt(3.0), 9.0 / 5.0, key);
    }
    EXPECT_EQ(state.at("patch_embed.proj.weight").sizes(), (std::vector<int64_t>{d, cfg.in_chans, cfg.patch, cfg.patch}));
    EXPECT_GE(state.at("patch_embed.proj.weight").abs().max().item<double>(), 0.99 * bound);
  }
  // Every tensor of the state is covered above: (4 weights + 6 zeros + 2 ones) a block, and 8 more.
  EXPECT_EQ(state.size(), static_cast<size_t>(12 * cfg.depth + 8));
  // Deterministic: the same seed gives the same state bitwise, another seed another one.
  VisionTransformer same(cfg);
  for (const auto& [key, t] : same->state()) EXPECT_TRUE(torch::equal(t.to(torch::kFloat64), state.at(key))) << key;
  ViTConfig other = cfg;
  other.init.seed = 6;
  VisionTransformer different(other);
  for (const char* key : {"pos_embed", "cls_token", "head.weight", "patch_embed.proj.weight", "blocks.1.attn.qkv.weight"})
    EXPECT_FALSE(torch::equal(different->state().at(key).to(torch::kFloat64), state.at(key))) << key;
}

}  // namespace
}  // namespace jacond
