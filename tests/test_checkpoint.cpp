// Checkpoints (models/checkpoint.h): round trip, newest-complete selection, retention, cleanup
// of interrupted writes, and one-line errors for malformed checkpoint files.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "models/checkpoint.h"
#include "models/vit.h"

namespace jacond {
namespace {

namespace fs = std::filesystem;

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = (fs::temp_directory_path() / ("jacond_ckpt_" + std::to_string(::getpid()))).string();
    fs::remove_all(run_);
  }
  void TearDown() override { fs::remove_all(run_); }
  std::string write(int64_t step) {
    models::TensorMap state{{"w", torch::full({2, 3}, static_cast<float>(step))}};
    auto saver = [&](torch::serialize::OutputArchive& a) { a.write("moment", torch::full({4}, 0.5 * step)); };
    return models::write_checkpoint(run_, step, state, saver, {{"model", {{"dim", 8}}}, {"note", "x"}});
  }
  std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }
  std::string run_;
};

TEST_F(Checkpoints, RoundTrip) {
  const std::string dir = write(120);
  EXPECT_EQ(fs::path(dir).filename(), "step-0000120");
  const models::Checkpoint c = models::read_checkpoint(dir);
  EXPECT_EQ(c.meta["step"], 120);
  EXPECT_EQ(c.meta["format"], models::kCheckpointFormat);
  EXPECT_EQ(c.meta["note"], "x");
  EXPECT_TRUE(torch::equal(c.model.at("w"), torch::full({2, 3}, 120.0f)));
  torch::Tensor moment;
  models::read_optimizer_state(dir, [&](torch::serialize::InputArchive& a) { a.read("moment", moment); });
  EXPECT_TRUE(torch::equal(moment, torch::full({4}, 60.0)));
}

TEST_F(Checkpoints, NewestCompleteRetentionAndPartialCleanup) {
  for (int64_t s : {10, 30, 20}) write(s);
  // An interrupted write: a .tmp directory and a step directory without its files.
  fs::create_directories(fs::path(run_) / ".tmp-step-0000040.999");
  fs::create_directories(fs::path(run_) / "step-0000050");
  const auto all = models::list_checkpoints(run_);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.back().step, 30);
  EXPECT_EQ(models::resolve_resume_checkpoint(run_), all.back().dir);
  models::prune_checkpoints(run_, 2);
  const auto kept = models::list_checkpoints(run_);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.front().step, 20);
  models::clean_partial_checkpoints(run_);
  EXPECT_FALSE(fs::exists(fs::path(run_) / ".tmp-step-0000040.999"));
}

TEST_F(Checkpoints, MalformedFilesGiveOneLineErrors) {
  const std::string dir = write(5);
  {
    std::ofstream(dir + "/meta.json") << "{\"format\": \"jacond-checkpoint/1\", \"step\": ";
  }
  std::string msg = error_of([&] { models::read_checkpoint(dir); });
  EXPECT_EQ(msg.rfind(dir + "/meta.json: malformed JSON", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);

  const std::string dir2 = write(6);
  fs::resize_file(dir2 + "/model.safetensors", 40);
  msg = error_of([&] { models::read_checkpoint(dir2); });
  EXPECT_EQ(msg.rfind(dir2 + "/model.safetensors: ", 0), 0u) << msg;

  const std::string dir3 = write(7);
  { std::ofstream(dir3 + "/optimizer.pt") << "not a zip archive"; }
  msg = error_of([&] { models::read_optimizer_state(dir3, [](torch::serialize::InputArchive&) {}); });
  EXPECT_EQ(msg.rfind(dir3 + "/optimizer.pt: unreadable optimizer state", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);

  EXPECT_NE(error_of([&] { models::resolve_resume_checkpoint(run_ + "/nothing"); }).find("no complete checkpoint"),
            std::string::npos);
}

}  // namespace
}  // namespace jacond
