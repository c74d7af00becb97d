// Checkpoints (models/io/checkpoint.h): round trip, newest-complete selection, retention, cleanup
// of interrupted writes, and one-line errors for malformed checkpoint files.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "models/io/checkpoint.h"
#include "models/vit/vit.h"
#include "support/error_message.h"
#include "support/fuzz_seeds.h"

namespace jacond {
namespace {

namespace fs = std::filesystem;

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = (fs::temp_directory_path() / ("jacond_ckpt_" + std::to_string(::getpid()))).string();
    fs::remove_all(run_);
  }
  void TearDown() override {
    models::set_checkpoint_crash_point_for_testing({});
    fs::remove_all(run_);
    fs::remove_all(run_ + ".crash");
  }
  std::string write(int64_t step) {
    models::TensorMap state{{"w", torch::full({2, 3}, static_cast<float>(step))}};
    auto saver = [&](torch::serialize::OutputArchive& a) { a.write("moment", torch::full({4}, 0.5 * step)); };
    return models::write_checkpoint(run_, step, state, saver, {{"model", {{"dim", 8}}}, {"note", "x"}});
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
  models::read_optimizer_state(dir, torch::kCPU, [&](torch::serialize::InputArchive& a) { a.read("moment", moment); });
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

// Replacing a step that exists (a stale checkpoint of the same step) removed the old step-N
// before renaming the new one in: a crash between the two left only .tmp-step-N.<pid>, which
// clean_partial_checkpoints deletes at the next start, and the step was gone. A crash is
// simulated by copying the run directory at each point of write_checkpoint where the disk state
// changes (what a crash there would leave); after clean_partial_checkpoints every copy must hold
// a complete step-N, old or new, and no leftover.
TEST_F(Checkpoints, ReplacingAStepSurvivesACrashAtEveryPoint) {
  write(5);  // the old step-0000005, note "x"
  const fs::path crash = run_ + ".crash";
  fs::create_directories(crash);
  std::vector<std::string> points;
  models::set_checkpoint_crash_point_for_testing([&](const std::string& point) {
    points.push_back(point);
    fs::copy(run_, crash / point, fs::copy_options::recursive);
  });
  models::TensorMap state{{"w", torch::full({2, 3}, 50.0f)}};
  auto saver = [](torch::serialize::OutputArchive& a) { a.write("moment", torch::zeros({4})); };
  models::write_checkpoint(run_, 5, state, saver, {{"model", {{"dim", 8}}}, {"note", "new"}});
  models::set_checkpoint_crash_point_for_testing({});
  EXPECT_EQ(points, (std::vector<std::string>{"new-complete", "old-set-aside", "new-installed"}));

  auto expect_one_complete_step = [](const fs::path& run, const std::string& note) {
    models::clean_partial_checkpoints(run.string());
    const auto all = models::list_checkpoints(run.string());
    ASSERT_EQ(all.size(), 1u) << run;
    EXPECT_EQ(all[0].step, 5) << run;
    const models::Checkpoint c = models::read_checkpoint(all[0].dir);
    EXPECT_EQ(c.meta["note"], note) << run;
    EXPECT_TRUE(torch::equal(c.model.at("w"), torch::full({2, 3}, note == "new" ? 50.0f : 5.0f))) << run;
    for (const auto& e : fs::directory_iterator(run))
      EXPECT_EQ(e.path().filename().string().rfind('.', 0), std::string::npos) << "left behind: " << e.path();
  };
  expect_one_complete_step(crash / "new-complete", "x");   // the new one not yet in: the old stays
  expect_one_complete_step(crash / "old-set-aside", "x");  // only the set-aside copy: restored
  expect_one_complete_step(crash / "new-installed", "new");
  expect_one_complete_step(run_, "new");  // no crash: the old one removed by write_checkpoint itself
}

TEST_F(Checkpoints, SetAsideStepIsKeptWhileItsReplacementIsIncomplete) {
  // A .old-step-N beside a step-N that is not a complete checkpoint (no model files): neither
  // copy is known good, so the set-aside one is left for the user, not deleted.
  write(5);
  const fs::path run(run_);
  fs::rename(run / "step-0000005", run / ".old-step-0000005.999");
  fs::create_directories(run / "step-0000005");
  models::clean_partial_checkpoints(run_);
  EXPECT_TRUE(fs::exists(run / ".old-step-0000005.999" / "model.safetensors"));
}

// --resume RUN after a crash mid-replacement of the newest step (step-5 set aside as .old-step-5,
// its replacement not yet in place) does not resume step 3 (step 5 would then be restored as the
// run's future): one line names the set-aside step and how to restore it, and nothing is moved
// (the run may be another process's, still writing).
TEST_F(Checkpoints, ResumeAfterACrashMidReplacementNamesTheSetAsideStep) {
  write(3);
  write(5);
  const fs::path run(run_);
  fs::rename(run / "step-0000005", run / ".old-step-0000005.999");
  const std::string msg = jacond::test::error_message([&] { models::resolve_resume_checkpoint(run_); });
  EXPECT_NE(msg.find(".old-step-0000005.999 holds step-0000005"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rename it to " + (run / "step-0000005").string()), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(run / ".old-step-0000005.999" / "meta.json"));
  fs::rename(run / ".old-step-0000005.999", run / "step-0000005");
  EXPECT_EQ(fs::path(models::resolve_resume_checkpoint(run_)).filename(), "step-0000005");
}

// The steps the next start restores (a .old-step-N without its step-N), found without moving
// anything: a run directory's checks count them as held (models/train/trainer.cpp).
TEST_F(Checkpoints, SetAsideStepsAreListedWithoutBeingRestored) {
  write(3);
  write(5);
  write(7);
  const fs::path run(run_);
  fs::rename(run / "step-0000007", run / ".old-step-0000007.999");
  fs::copy(run / "step-0000005", run / ".old-step-0000005.998", fs::copy_options::recursive);  // step-5 is there
  fs::create_directories(run / ".old-notastep.1");
  const auto aside = models::list_set_aside_checkpoints(run_);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(aside[0].step, 7);
  EXPECT_EQ(fs::path(aside[0].dir).filename(), ".old-step-0000007.999");
  EXPECT_FALSE(fs::exists(run / "step-0000007"));
  EXPECT_EQ(models::list_checkpoints(run_).back().step, 5);
  EXPECT_TRUE(models::list_set_aside_checkpoints(run_ + "/missing").empty());
}

TEST_F(Checkpoints, MalformedFilesGiveOneLineErrors) {
  const std::string dir = write(5);
  {
    std::ofstream(dir + "/meta.json") << "{\"format\": \"jacond-checkpoint/1\", \"step\": ";
  }
  std::string msg = jacond::test::error_message([&] { models::read_checkpoint(dir); });
  EXPECT_EQ(msg.rfind(dir + "/meta.json: malformed JSON", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);

  const std::string dir2 = write(6);
  fs::resize_file(dir2 + "/model.safetensors", 40);
  msg = jacond::test::error_message([&] { models::read_checkpoint(dir2); });
  EXPECT_EQ(msg.rfind(dir2 + "/model.safetensors: ", 0), 0u) << msg;

  const std::string dir3 = write(7);
  { std::ofstream(dir3 + "/optimizer.pt") << "not a zip archive"; }
  msg = jacond::test::error_message([&] { models::read_optimizer_state(dir3, torch::kCPU, [](torch::serialize::InputArchive&) {}); });
  EXPECT_EQ(msg.rfind(dir3 + "/optimizer.pt: unreadable optimizer state", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);

  EXPECT_NE(jacond::test::error_message([&] { models::resolve_resume_checkpoint(run_ + "/nothing"); }).find("no complete checkpoint"),
            std::string::npos);
}

TEST_F(Checkpoints, AMetaJsonWhoseStepIsNotItsDirectorysIsRefused) {
  const std::string five = write(5), six = write(6);
  fs::copy_file(five + "/meta.json", six + "/meta.json", fs::copy_options::overwrite_existing);
  EXPECT_EQ(jacond::test::error_message([&] { models::read_checkpoint(six); }),
            six + "/meta.json: step 5, but its directory is step-0000006");
  const std::string slash = jacond::test::error_message([&] { models::read_checkpoint(six + "/"); });
  EXPECT_NE(slash.find("step 5, but its directory is step-0000006"), std::string::npos) << slash;
  // A checkpoint copied out of its run keeps its meta's step: the name is not a step's.
  const std::string best = run_ + "/best";
  fs::copy(five, best, fs::copy_options::recursive);
  EXPECT_EQ(models::read_checkpoint(best).meta["step"], 5);
  EXPECT_EQ(models::read_checkpoint(five).meta["step"], 5);
}

using jacond::test::printable_ascii;

TEST_F(Checkpoints, MetaJsonRawBytesNeverReachTheMessage) {
  const std::string dir = write(8);
  // Invalid UTF-8 and an escape sequence: nlohmann quotes them in its parse error.
  { std::ofstream(dir + "/meta.json", std::ios::binary) << "{\"format\": \"jacond\xff\x1b[2J\", \"step\": 1}"; }
  std::string msg = jacond::test::error_message([&] { models::read_checkpoint(dir); });
  EXPECT_EQ(msg.rfind(dir + "/meta.json: malformed JSON: ", 0), 0u) << msg;
  EXPECT_TRUE(printable_ascii(msg)) << msg;
  EXPECT_NE(msg.find("\\xff"), std::string::npos) << msg;
  // Valid JSON carrying controls and non-ASCII in the value that the message quotes.
  const std::string text = "{\"format\": \"x\\u001b[31m\\u00e9\", \"step\": 1, \"model\": {}}";
  msg = jacond::test::error_message([&] { models::parse_checkpoint_meta(text, "m.json"); });
  EXPECT_EQ(msg, "m.json: not a jacond-checkpoint/1 meta.json (format \"x\\x1b[31m\\xc3\\xa9\")");
}

TEST_F(Checkpoints, MetaJsonFieldsAreValidatedWithOneLineErrors) {
  auto err = [&](const std::string& text) { return jacond::test::error_message([&] { models::parse_checkpoint_meta(text, "m.json"); }); };
  const std::string ok = "{\"format\": \"jacond-checkpoint/1\", \"step\": 3, \"model\": {\"dim\": 8}}";
  EXPECT_EQ(models::parse_checkpoint_meta(ok, "m.json")["step"], 3);
  // A non-string format used to escape as nlohmann's type_error (not a runtime_error).
  EXPECT_EQ(err("{\"format\": 1, \"step\": 3, \"model\": {}}"),
            "m.json: not a jacond-checkpoint/1 meta.json (format 1)");
  EXPECT_EQ(err("{\"step\": 3, \"model\": {}}"), "m.json: not a jacond-checkpoint/1 meta.json (format missing)");
  EXPECT_EQ(err("[1, 2]"), "m.json: not a JSON object");
  EXPECT_EQ(err("{\"format\": \"jacond-checkpoint/1\", \"step\": -1, \"model\": {}}"),
            "m.json: 'step' -1 is outside [0, 2^63)");
  EXPECT_EQ(err("{\"format\": \"jacond-checkpoint/1\", \"step\": 18446744073709551615, \"model\": {}}"),
            "m.json: 'step' 18446744073709551615 is outside [0, 2^63)");
  EXPECT_EQ(err("{\"format\": \"jacond-checkpoint/1\", \"step\": 2.5, \"model\": {}}"), "m.json: no integer 'step'");
  EXPECT_EQ(err("{\"format\": \"jacond-checkpoint/1\", \"step\": 2, \"model\": 7}"), "m.json: no 'model' config");
  // nlohmann's lexer stops at a NUL byte: "{valid}\0garbage" was accepted as "{valid}".
  EXPECT_EQ(err(ok + std::string(1, '\0') + "garbage"),
            "m.json: malformed JSON: NUL byte at offset " + std::to_string(ok.size()));
  // A number beyond double: nlohmann's out_of_range, found by tests/fuzz (escaped uncaught).
  const std::string big = err("{\"x\": 1e400}");
  EXPECT_EQ(big.rfind("m.json: malformed JSON: ", 0), 0u) << big;
  EXPECT_EQ(big.find('\n'), std::string::npos) << big;
}

TEST_F(Checkpoints, FailedWriteLeavesNoTemporaryDirectory) {
  models::TensorMap state{{"w", torch::ones({2})}};
  auto failing = [](torch::serialize::OutputArchive&) { throw std::runtime_error("optimizer says no"); };
  EXPECT_EQ(jacond::test::error_message([&] { models::write_checkpoint(run_, 9, state, failing, {{"model", {{"dim", 8}}}}); }),
            "optimizer says no");
  for (const auto& e : fs::directory_iterator(run_))
    ADD_FAILURE() << "left behind: " << e.path().string();
  // A c10::Error (multi-line, with backtrace) becomes one line naming the checkpoint.
  auto torch_failing = [](torch::serialize::OutputArchive&) { TORCH_CHECK(false, "bad state\nsecond line"); };
  const std::string msg = jacond::test::error_message([&] { models::write_checkpoint(run_, 9, state, torch_failing, {{"model", {}}}); });
  EXPECT_EQ(msg.rfind(run_ + "/step-0000009: checkpoint write failed: bad state", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(run_));
}

TEST_F(Checkpoints, MissingOrNonDirectoryRunHasNoCheckpoints) {
  // A run "directory" that is a file, or missing: nothing to list, as before. (One that exists
  // but cannot be read now throws; not testable here, the tests may run as root.)
  const std::string f = run_ + ".file";
  { std::ofstream(f) << "x"; }
  EXPECT_TRUE(models::list_checkpoints(f).empty());
  fs::remove(f);
  EXPECT_TRUE(models::list_checkpoints(run_ + "/missing").empty());
}

// The fuzz seeds' names are their verdicts (tests/support/fuzz_seeds.h): each bad_* meta.json
// refused with a runtime_error of one clean line, each other one parsed.
TEST(CheckpointMetaFuzzSeeds, EachSeedGetsTheVerdictItsNameSays) {
  const auto seeds = test::fuzz_seeds("fuzz_checkpoint_meta");
  ASSERT_GE(seeds.size(), 5u);
  for (const auto& seed : seeds) {
    try {
      const nlohmann::json meta = models::parse_checkpoint_meta(seed.bytes, seed.name);
      EXPECT_FALSE(seed.bad()) << seed.name << " was read (step " << meta.at("step") << ")";
    } catch (const std::runtime_error& e) {
      EXPECT_TRUE(seed.bad()) << seed.name << " was refused: " << e.what();
      EXPECT_TRUE(test::clean_message(e.what())) << seed.name << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace jacond
