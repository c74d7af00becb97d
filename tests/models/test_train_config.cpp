// TrainConfig's field table (models/train/train_config.h): every field survives config.json,
// every flag and key is spelled once, the optimizer defaults, and every finalize() error names
// the flag a user types. The expected values and flag spellings are written out here by hand,
// independently of the table.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/report/block_report.h"
#include "analysis/report/weight_report.h"
#include "models/track/conditioning.h"
#include "models/train/train_config.h"
#include "models/train/trainer.h"
#include "support/error_message.h"

namespace {

using jacond::models::TrainConfig;
using jacond::models::TrainField;
using json = nlohmann::json;

// One non-default, valid value per saved field, written out by hand.
json every_field_changed() {
  return {{"optimizer", "adamw"}, {"lr", 0.0125}, {"min_lr", 0.0005}, {"beta1", 0.8}, {"beta2", 0.98},
          {"eps", 1e-7}, {"weight_decay", 0.125}, {"shampoo_beta", 0.75}, {"precondition_frequency", 7},
          {"max_precond_dim", 333}, {"warmup_steps", 11}, {"clip_grad", 2.5}, {"data_dir", "/data/fm"},
          {"data_limit", 1000}, {"test_limit", 500}, {"augment", true}, {"crop_pad", 3}, {"flip", false},
          {"batch", 64}, {"steps", 99}, {"epochs", 4}, {"threads", 3}, {"seed", 17}, {"device", "cuda"},
          {"out_dir", "runs/x"}, {"log_every", 2}, {"print_every", 5}, {"eval_every", 9}, {"checkpoint_every", 13}, {"checkpoint_init", true},
          {"keep", 4}, {"track_every", 21}, {"probe_size", 2}, {"track_method", "lanczos"}, {"track_seconds", 2.5}, {"dist_timeout", 45.0}, {"dist_backend", "nccl"}, {"track_split", "rank0"},
          {"track_device", "cpu"}, {"track_matrices", "mix_out,block_out"}, {"token_graying", "svd"}, {"tg_eps", 0.6}, {"arch", "convmixer"},
          {"kernel", 3}};  // a ConvMixer run: its own tracking names
}

TEST(TrainConfig, EveryFieldRoundTripsThroughConfigJson) {
  const json want = every_field_changed();
  const TrainConfig c = TrainConfig::from_json(want);
  json got = c.to_json();
  ASSERT_TRUE(got.contains("model"));
  got.erase("model");
  EXPECT_EQ(got, want) << "a field of the table is missing here or not saved/loaded";
  // Each value really differs from the default, so the round trip proves the field is read.
  const json defaults = [] {
    TrainConfig d;
    return d.to_json();
  }();
  for (auto it = want.begin(); it != want.end(); ++it) EXPECT_NE(defaults.at(it.key()), it.value()) << it.key();
}

TEST(TrainConfig, FlagsAndKeysAreSpelledOnce) {
  std::set<std::string> keys, flags;
  int rows = 0, unsaved = 0;
  jacond::models::for_each_train_field(static_cast<const TrainConfig&>(TrainConfig{}), [&](const TrainField& f, const auto&) {
    ++rows;
    keys.insert(f.key);
    flags.insert(f.flag);
    unsaved += !f.saved;
    EXPECT_TRUE(std::string(f.group) == "model" || std::string(f.group) == "optimizer" || std::string(f.group) == "data" ||
                std::string(f.group) == "run" || std::string(f.group) == "tracking")
        << f.group;
  });
  EXPECT_EQ(keys.size(), static_cast<size_t>(rows));
  EXPECT_EQ(flags.size(), static_cast<size_t>(rows));
  EXPECT_EQ(unsaved, 1);  // stop_at: run control
  EXPECT_EQ(jacond::models::train_flag("warmup_steps"), "--warmup-steps");
  EXPECT_EQ(jacond::models::train_flag("out_dir"), "--out");
  EXPECT_EQ(jacond::models::train_flag("stop_at"), "--stop-at");
  EXPECT_THROW(jacond::models::train_flag("warmup"), std::logic_error);
}

// --track-matrices's help names every matrix the ViT's tracking accepts: the block and token
// matrices and the data-free ones (W_VO, W_QK_h, ...), which it accepted while the help left them out.
TEST(TrainConfig, TrackMatricesHelpNamesEveryAcceptedMatrix) {
  std::string help;
  jacond::models::for_each_train_field(static_cast<const TrainConfig&>(TrainConfig{}), [&](const TrainField& f, const auto&) {
    if (std::string(f.key) == "track_matrices") help = f.help;
  });
  ASSERT_FALSE(help.empty());
  std::set<std::string> words;  // the help's words, split at spaces, commas and parentheses
  std::string word;
  for (const char ch : help + " ") {
    if (ch == ' ' || ch == ',' || ch == '(' || ch == ')' || ch == ';' || ch == ':') {
      if (!word.empty()) words.insert(word);
      word.clear();
    } else {
      word += ch;
    }
  }
  std::vector<std::string> names = jacond::block_matrix_names();
  for (const auto& m : jacond::weight_matrix_names()) names.push_back(m);
  for (const auto& m : names) {
    EXPECT_TRUE(words.count(m)) << m << " is not in: " << help;
    EXPECT_EQ(jacond::models::parse_matrix_list(m), std::vector<std::string>{m});
  }
}

TEST(TrainConfig, StopAtIsNotSaved) {
  TrainConfig c;
  c.stop_at = 7;
  EXPECT_FALSE(c.to_json().contains("stop_at"));
  EXPECT_EQ(TrainConfig::from_json(json{{"stop_at", 7}}).stop_at, 0);
}

TEST(TrainConfig, OptimizerDefaultsAreFilledByFinalize) {
  TrainConfig soap;
  soap.finalize();
  EXPECT_EQ(soap.lr, 3e-3);
  EXPECT_EQ(soap.beta1, 0.95);
  EXPECT_EQ(soap.beta2, 0.95);
  EXPECT_EQ(soap.eps, 1e-8);
  EXPECT_EQ(soap.weight_decay, 0.01);
  TrainConfig adamw;
  adamw.optimizer = "adamw";
  adamw.finalize();
  EXPECT_EQ(adamw.lr, 1e-3);
  EXPECT_EQ(adamw.beta1, 0.9);
  EXPECT_EQ(adamw.beta2, 0.999);
  EXPECT_EQ(adamw.weight_decay, 0.05);
  // A value given explicitly is kept, and finalize is idempotent.
  TrainConfig given;
  given.lr = 0.5;
  given.finalize();
  given.finalize();
  EXPECT_EQ(given.lr, 0.5);
  EXPECT_EQ(given.beta1, 0.95);
}

struct BadValue {
  const char* key;
  json value;
  const char* flag;  // as the user types it
};

TEST(TrainConfig, EveryErrorNamesTheFlagTheUserTyped) {
  const std::vector<BadValue> cases = {
      {"optimizer", "sgd", "--optimizer"}, {"lr", 0.0, "--lr"}, {"beta1", 1.0, "--beta1"}, {"beta2", 1.5, "--beta2"},
      {"eps", 0.0, "--eps"}, {"shampoo_beta", 1.0, "--shampoo-beta"}, {"min_lr", 1.0, "--min-lr"},
      {"precondition_frequency", 0, "--precondition-frequency"}, {"max_precond_dim", 0, "--max-precond-dim"},
      {"warmup_steps", -1, "--warmup-steps"}, {"batch", 0, "--batch"}, {"steps", -1, "--steps"},
      {"epochs", -1, "--epochs"}, {"data_limit", -1, "--data-limit"}, {"test_limit", -1, "--test-limit"},
      {"crop_pad", -1, "--crop-pad"}, {"threads", 0, "--threads"}, {"device", "tpu", "--device"},
      {"log_every", 0, "--log-every"}, {"print_every", 0, "--print-every"}, {"eval_every", -1, "--eval-every"},
      {"checkpoint_every", -1, "--checkpoint-every"}, {"keep", -1, "--keep"}, {"track_every", -1, "--track-every"},
      {"probe_size", 0, "--probe-size"}, {"track_seconds", 0.0, "--track-seconds"},
      {"dist_timeout", 0.0, "--dist-timeout"}, {"dist_timeout", 1e300, "--dist-timeout"},  // 1e300 s overflowed the ms
      {"track_split", "rank1", "--track-split"},
      {"track_device", "gpu", "--track-device"},
      {"dist_backend", "mpi", "--dist-backend"}, {"dist_backend", "nccl", "--dist-backend"},  // nccl on the CPU
      {"track_method", "magic", "--track-method"}, {"track_matrices", "K_nope", "--track-matrices"},
      {"arch", "resnet", "--arch"}, {"token_graying", "fft", "--token-graying"}, {"tg_eps", 0.0, "--tg-eps"},
  };
  for (const BadValue& b : cases) {
    const std::string m = jacond::test::error_message([&] { TrainConfig::from_json(json{{b.key, b.value}}); });
    EXPECT_EQ(m.rfind(std::string(b.flag) + " ", 0) == 0 || m.rfind(std::string(b.flag) + ":", 0) == 0, true)
        << b.key << ": '" << m << "' does not start with " << b.flag;
  }
  // A ConvMixer's own checks (kernel, skip, init, tracking names) name their flags too.
  const std::string kernel = jacond::test::error_message([] { TrainConfig::from_json(json{{"arch", "convmixer"}, {"kernel", 4}}); });
  EXPECT_EQ(kernel.rfind("--kernel ", 0), 0u) << kernel;
  const std::string names = jacond::test::error_message(
      [] { TrainConfig::from_json(json{{"arch", "convmixer"}, {"track_matrices", "K_sa"}}); });
  EXPECT_EQ(names.rfind("--track-matrices: ", 0), 0u) << names;
  TrainConfig sab;
  sab.arch = "convmixer";
  sab.model.skip = jacond::models::SkipKind::kSab;
  EXPECT_EQ(jacond::test::error_message([&] { sab.finalize(); }).rfind("--arch convmixer: --skip must be full or none", 0), 0u);
  // A model whose weights, gradients and two moments alone exceed the machine is refused at once,
  // naming --depth and --dim (16 bytes a weight: 1e8 blocks of d = 16 are 1e8 * 3072 * 16 bytes).
  const std::string deep = jacond::test::error_message(
      [] { TrainConfig::from_json(json{{"model", {{"dim", 16}, {"heads", 2}, {"depth", 100000000}}}}); });
  EXPECT_EQ(deep.rfind("--depth 100000000 --dim 16: the weights, gradients and optimizer moments alone need 4916 GB", 0), 0u)
      << deep;
  EXPECT_NO_THROW(TrainConfig::from_json(json{{"model", {{"dim", 16}, {"heads", 2}, {"depth", 1000}}}}));
  // A ConvMixer's saved config keeps the ViT fields it does not use (heads 3 at dim 8): it reads
  // back (a resume failed with "--heads 3 does not divide --dim 8"); a ViT's is still checked.
  const json unused_heads = {{"arch", "convmixer"}, {"model", {{"dim", 8}, {"heads", 3}, {"patch", 4}}}};
  EXPECT_EQ(TrainConfig::from_json(unused_heads).model.dim, 8);
  json vit = unused_heads;
  vit["arch"] = "vit";
  EXPECT_EQ(jacond::test::error_message([&] { TrainConfig::from_json(vit); }).rfind("--heads 3 does not divide --dim 8", 0), 0u);
  // A post-norm ViT has no K_ffn: a typed list naming it is refused, the default tracks per head.
  TrainConfig post;
  post.model.norm = jacond::models::NormPlacement::kPost;
  TrainConfig post_typed = post;
  post_typed.track_matrices = "K_sa,K_ffn";
  const std::string post_names = jacond::test::error_message([&] { post_typed.finalize(); });
  EXPECT_EQ(post_names.rfind("--track-matrices: ", 0), 0u) << post_names;
  EXPECT_NE(post_names.find("not K_ffn"), std::string::npos) << post_names;
  post.finalize();
  EXPECT_EQ(post.track_matrices, "softmax,attention");
  EXPECT_EQ(TrainConfig{}.track_matrices, "K_ffn,softmax,attention");
  // The backend must fit the device (auto always does).
  TrainConfig gloo_on_gpu;
  gloo_on_gpu.device = "cuda";
  gloo_on_gpu.dist_backend = "gloo";
  EXPECT_EQ(jacond::test::error_message([&] { gloo_on_gpu.finalize(); }),
            "--dist-backend gloo cannot average cuda gradients (gloo: --device cpu, nccl: --device cuda)");
  gloo_on_gpu.dist_backend = "auto";
  EXPECT_EQ(gloo_on_gpu.resolved_dist_backend(), "nccl");
  EXPECT_EQ(TrainConfig{}.resolved_dist_backend(), "gloo");
  // Where tracking runs: the run's device unless --track-device cpu; a config saved before the
  // field existed (no "track_device") tracked on the host and resumes so.
  TrainConfig same_on_gpu;
  same_on_gpu.device = "cuda";
  EXPECT_EQ(same_on_gpu.resolved_track_device(), "cuda");
  same_on_gpu.track_device = "cpu";
  EXPECT_EQ(same_on_gpu.resolved_track_device(), "cpu");
  EXPECT_EQ(TrainConfig{}.resolved_track_device(), "cpu");
  EXPECT_EQ(TrainConfig::from_json(json{{"device", "cuda"}}).resolved_track_device(), "cpu");
  EXPECT_EQ(TrainConfig::from_json(json{{"device", "cuda"}, {"track_device", "same"}}).resolved_track_device(), "cuda");
  // The rows a device can take: K_sa, B_sa, E_sa, K_sab; K_mlp and K_ffn under lanczos only.
  TrainConfig rows;
  EXPECT_TRUE(rows.device_tracked_matrices().empty()) << "the default set (K_ffn, softmax, attention) stays on the host";
  rows.track_matrices = "K_sa,K_ffn,softmax";
  EXPECT_EQ(rows.device_tracked_matrices(), std::vector<std::string>{"K_sa"});
  rows.track_method = "lanczos";
  EXPECT_EQ(rows.device_tracked_matrices(), (std::vector<std::string>{"K_sa", "K_ffn"}));
  rows.track_every = 0;
  EXPECT_TRUE(rows.device_tracked_matrices().empty());
  TrainConfig stop;
  stop.stop_at = -1;
  EXPECT_EQ(jacond::test::error_message([&] { stop.finalize(); }).rfind("--stop-at ", 0), 0u);
  TrainConfig none;
  none.steps = 0;
  none.epochs = 0;
  EXPECT_NE(jacond::test::error_message([&] { none.finalize(); }).find("--steps or --epochs must be > 0"), std::string::npos);
  // The model's flags are named too (ViTConfig::validate).
  TrainConfig heads;
  heads.model.heads = 5;
  EXPECT_EQ(jacond::test::error_message([&] { heads.finalize(); }).rfind("--heads 5 does not divide --dim 192", 0), 0u);
}

TEST(TrainConfig, WrongJsonTypeIsOneLine) {
  const std::string m = jacond::test::error_message([] { TrainConfig::from_json(json{{"batch", "many"}}); });
  EXPECT_EQ(m.rfind("train config: ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

}  // namespace

namespace {

// Warmup lr·t/W, then a cosine from the peak at step W + 1 towards min_lr, which the step after
// the last would reach: the last step still moves the weights (it was at min_lr, 0 by default).
TEST(Schedule, WarmupThenACosineWhoseLastStepStillMoves) {
  using jacond::models::scheduled_lr;
  EXPECT_DOUBLE_EQ(scheduled_lr(1, 10, 2, 1.0, 0.1), 0.5);
  EXPECT_DOUBLE_EQ(scheduled_lr(2, 10, 2, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(3, 10, 2, 1.0, 0.1), 1.0);  // progress 0
  EXPECT_NEAR(scheduled_lr(10, 10, 2, 1.0, 0.1), 0.1 + 0.45 * (1 + std::cos(M_PI * 7.0 / 8.0)), 1e-15);
  EXPECT_GT(scheduled_lr(10, 10, 2, 1.0, 0.0), 0.0);
  for (int64_t t = 3; t < 10; ++t) EXPECT_GE(scheduled_lr(t, 10, 2, 1.0, 0.1), scheduled_lr(t + 1, 10, 2, 1.0, 0.1)) << t;
  EXPECT_DOUBLE_EQ(scheduled_lr(1, 4, 0, 2.0, 0.0), 2.0);  // no warmup: the first step at the peak
  EXPECT_NEAR(scheduled_lr(4, 4, 0, 2.0, 0.0), 1.0 + std::cos(M_PI * 3.0 / 4.0), 1e-15);
}

}  // namespace
