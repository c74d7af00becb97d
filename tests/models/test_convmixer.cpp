// The ConvMixer control (models/classifier/convmixer.h): its forward against the same network
// written out with torch's functional ops from its own state (the wiring: GELU before BatchNorm,
// the residual around the spatial mixing only, mean pooling), its state round trip, its errors,
// and the token-matrix κ of convmixer_conditioning against an independent SVD.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "models/classifier/convmixer.h"
#include "models/track/conditioning.h"

namespace jacond {
namespace {

using models::ConvMixer;
using models::ConvMixerConfig;

ConvMixerConfig small(bool skip) {
  ConvMixerConfig c;
  c.dim = 8;
  c.depth = 2;
  c.patch = 4;
  c.kernel = 3;
  c.skip = skip;
  return c;
}

// Eval-mode BatchNorm from the state: (x − running_mean)/√(running_var + 1e-5)·weight + bias.
torch::Tensor batch_norm(const torch::Tensor& x, const models::TensorMap& s, const std::string& p) {
  return torch::nn::functional::batch_norm(x, s.at(p + ".running_mean"), s.at(p + ".running_var"),
                                           torch::nn::functional::BatchNormFuncOptions()
                                               .weight(s.at(p + ".weight")).bias(s.at(p + ".bias")).eps(1e-5));
}

torch::Tensor written_out(const models::TensorMap& s, const ConvMixerConfig& c, const torch::Tensor& images) {
  namespace F = torch::nn::functional;
  torch::Tensor x = batch_norm(torch::gelu(F::conv2d(images, s.at("stem_conv.weight"),
                                                     F::Conv2dFuncOptions().bias(s.at("stem_conv.bias")).stride(c.patch))),
                               s, "stem_norm");
  for (int64_t l = 0; l < c.depth; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    const torch::Tensor mix = batch_norm(
        torch::gelu(F::conv2d(x, s.at(b + "spatial.weight"),
                              F::Conv2dFuncOptions().bias(s.at(b + "spatial.bias")).padding(c.kernel / 2).groups(c.dim))),
        s, b + "spatial_norm");
    const torch::Tensor x1 = c.skip ? x + mix : mix;
    x = batch_norm(torch::gelu(F::conv2d(x1, s.at(b + "channel.weight"), F::Conv2dFuncOptions().bias(s.at(b + "channel.bias")))),
                   s, b + "channel_norm");
  }
  return F::linear(x.mean({2, 3}), s.at("head.weight"), s.at("head.bias"));
}

TEST(ConvMixer, ForwardIsTheNetworkWrittenOutWithAndWithoutTheSkip) {
  torch::manual_seed(5);
  const torch::Tensor images = torch::randn({3, 1, 28, 28});
  for (bool skip : {true, false}) {
    ConvMixer model(small(skip));
    model->train();  // a few training-mode passes move the running statistics off 0/1
    for (int i = 0; i < 3; ++i) model->forward(torch::randn({4, 1, 28, 28}));
    model->eval();
    const torch::Tensor got = model->forward(images);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{3, 10}));
    EXPECT_TRUE(torch::allclose(got, written_out(model->state(), small(skip), images), 1e-5, 1e-6)) << "skip " << skip;
  }
}

TEST(ConvMixer, StateRoundTripsAndBadStatesAreRejected) {
  ConvMixer a(small(true));
  ConvMixerConfig other = small(true);
  other.seed = 7;
  ConvMixer b(other);
  a->train();
  a->forward(torch::randn({4, 1, 28, 28}));
  const models::TensorMap s = a->state();
  EXPECT_TRUE(s.count("blocks.1.channel_norm.running_var") && s.count("stem_norm.num_batches_tracked"));
  b->load_state(s);
  a->eval();
  b->eval();
  const torch::Tensor x = torch::randn({2, 1, 28, 28});
  EXPECT_TRUE(torch::equal(a->forward(x), b->forward(x)));
  models::TensorMap missing = s, extra = s, nan = s;
  missing.erase("head.bias");
  extra["head.extra"] = torch::zeros({1});
  nan["head.weight"] = torch::full_like(s.at("head.weight"), NAN);
  EXPECT_THROW(b->load_state(missing), std::invalid_argument);
  EXPECT_THROW(b->load_state(extra), std::invalid_argument);
  EXPECT_THROW(b->load_state(nan), std::invalid_argument);
  ConvMixerConfig bad = small(true);
  bad.kernel = 4;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = small(true);
  bad.patch = 5;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  // Each bad field is named (one message used to say "--dim, --depth" for all four).
  const auto message = [](const ConvMixerConfig& c) {
    try {
      c.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  bad = small(true);
  bad.num_classes = 1;
  EXPECT_NE(message(bad).find("num_classes must be >= 2, got 1"), std::string::npos) << message(bad);
  bad = small(true);
  bad.in_chans = 0;
  EXPECT_NE(message(bad).find("in_chans must be >= 1, got 0"), std::string::npos) << message(bad);
  bad = small(true);
  bad.depth = 0;
  EXPECT_NE(message(bad).find("--depth must be >= 1, got 0"), std::string::npos) << message(bad);
  bad = small(true);
  bad.dim = 0;
  EXPECT_NE(message(bad).find("--dim must be >= 1, got 0"), std::string::npos) << message(bad);
}

// Each reported κ is σ_max/σ_min of the [n, h] token matrix, recomputed here by torch's SVD from
// the features; X + M is the sum of the reported X_in and mix_out.
TEST(ConvMixer, TokenMatrixKappaIsTheSvdOfTheFeatures) {
  for (bool skip : {true, false}) {
    ConvMixer model(small(skip));
    const torch::Tensor probe = torch::randn({2, 1, 28, 28});
    const auto reports = models::convmixer_conditioning(model, probe, {});
    ASSERT_EQ(reports.size(), 2u * 2u * 4u);
    std::vector<models::ConvMixerImpl::BlockFeatures> f;
    model->eval();
    model->forward_with_features(probe, f);
    EXPECT_TRUE(torch::allclose(f[0].mix_with_skip, f[0].input + f[0].mix));
    for (const auto& r : reports) {
      const auto& feats = f[r.layer];
      const torch::Tensor& t = r.report.matrix == "X_in" ? feats.input
                               : r.report.matrix == "mix_out" ? feats.mix
                               : r.report.matrix == "mix_block_out" ? feats.mix_with_skip : feats.output;
      const torch::Tensor sv = torch::linalg_svdvals(t[r.probe].to(torch::kFloat64));
      const double kappa = (sv.max() / sv.min()).item<double>();
      EXPECT_NEAR(r.report.kappa / kappa, 1.0, 1e-9) << r.report.matrix << " layer " << r.layer;
      EXPECT_EQ(r.report.rows, 49);  // 7 × 7 grid
    }
    // Block 1's input is block 0's output.
    EXPECT_TRUE(torch::equal(f[1].input, f[0].output));
  }
  ConvMixer model(small(true));
  EXPECT_EQ(models::convmixer_conditioning(model, torch::randn({1, 1, 28, 28}), {"mix_out"}).size(), 2u);
}

}  // namespace
}  // namespace jacond
