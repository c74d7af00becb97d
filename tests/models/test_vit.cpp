// The LibTorch ViT (models/vit/vit.h): shapes, timm names through safetensors, the block Jacobian of
// every skip mode against LibTorch autograd on the same weights (the analysis composition
// K_ffn(X1)·K_sab(X), with ReZero's α folded in), structural facts the tracker must report, and
// one-line errors for bad states.
#include <gtest/gtest.h>

#include <algorithm>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

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

}  // namespace
}  // namespace jacond
