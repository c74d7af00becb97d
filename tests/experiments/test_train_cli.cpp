// End-to-end tests of `jacond train` and `jacond audit` on real Fashion-MNIST (a tiny ViT, a
// few steps): the run directory's files, exact resume equivalence (N steps vs N/2 + resume),
// SIGKILL at random moments followed by resume, audit of the checkpoints (agreeing with the
// tracked conditioning.csv), and one-line errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "analysis/core/heap_policy.h"
#include "support/cli_harness.h"
#include "models/io/checkpoint.h"
#include "models/io/safetensors.h"
#include "models/vit/vit.h"

#include <torch/cuda.h>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace jacond::test::cli;

namespace {

constexpr int kSteps = 12;

std::vector<std::string> tiny_run(const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"train", "--dim", "16", "--depth", "2", "--heads", "2", "--patch", "7",
                             "--batch", "32", "--data-limit", "640", "--test-limit", "200", "--threads", "1",
                             "--steps", std::to_string(kSteps), "--warmup-steps", "3", "--optimizer", "soap",
                             "--precondition-frequency", "2", "--skip", "none", "--init", "ours", "--augment", "true",
                             "--track-every", "5", "--track-matrices", "K_sa,K_sab,softmax", "--checkpoint-every", "5",
                             "--print-every", "5", "--out", out};
  // Extra "--flag value" pairs replace the defaults above or are appended.
  for (size_t i = 0; i + 1 < extra.size(); i += 2) {
    auto it = std::find(a.begin(), a.end(), extra[i]);
    if (it != a.end()) *(it + 1) = extra[i + 1];
    else a.insert(a.end(), {extra[i], extra[i + 1]});
  }
  return a;
}

// The deterministic fields of train_log.jsonl, one entry per step (timings dropped).
std::vector<json> losses(const std::string& run) {
  std::vector<json> out;
  std::ifstream in(run + "/train_log.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    out.push_back({{"step", j["step"]}, {"loss", j["loss"]}, {"acc", j["acc"]}, {"lr", j["lr"]}, {"grad_norm", j["grad_norm"]}});
  }
  return out;
}

class TrainCli : public CliFixture {
 protected:
  // The uninterrupted reference run, trained once per test program.
  static const std::string& reference_run(CliFixture& self) {
    static std::string dir;
    if (dir.empty()) {
      dir = (fs::temp_directory_path() / ("jacond_train_ref_" + std::to_string(::getpid()))).string();
      fs::remove_all(dir);
      const RunResult r = self_run(self, tiny_run(dir));
      EXPECT_EQ(r.code, 0) << r.describe();
    }
    return dir;
  }
  static RunResult self_run(CliFixture& self, const std::vector<std::string>& args) {
    return static_cast<TrainCli&>(self).run(args);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / ("jacond_train_ref_" + std::to_string(::getpid())), ec);
  }
};

TEST_F(TrainCli, WritesLogsCheckpointsAndConditioning) {
  const std::string run_dir = reference_run(*this);
  const auto log = losses(run_dir);
  ASSERT_EQ(log.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ(log[s]["step"], s + 1);
  // Checkpoints every 5 steps and at the end, keep 3.
  const auto ckpts = jacond::models::list_checkpoints(run_dir);
  ASSERT_EQ(ckpts.size(), 3u);
  EXPECT_EQ(ckpts[0].step, 5);
  EXPECT_EQ(ckpts[2].step, kSteps);
  const auto c = jacond::models::read_checkpoint(ckpts[2].dir);
  EXPECT_TRUE(c.meta["rng"].contains("augment"));
  EXPECT_EQ(c.meta["model"]["skip"], "none");
  jacond::models::ViTConfig base;
  base.heads = 2;
  const auto cfg = jacond::models::infer_config(c.model, base);
  EXPECT_EQ(cfg.dim, 16);
  EXPECT_EQ(cfg.depth, 2);
  // conditioning.csv: steps 0, 5, 10, 12; both layers; the requested matrices only.
  const Csv cond = read_csv(run_dir + "/conditioning.csv");
  std::set<std::string> steps, layers, matrices;
  for (const auto& r : cond.rows) {
    steps.insert(r.at("step"));
    layers.insert(r.at("layer"));
    matrices.insert(r.at("matrix"));
    EXPECT_TRUE(kStatuses.count(r.at("status"))) << r.at("status");
  }
  EXPECT_EQ(steps, (std::set<std::string>{"0", "5", "10", "12"}));
  EXPECT_EQ(layers, (std::set<std::string>{"0", "1"}));
  EXPECT_EQ(matrices, (std::set<std::string>{"K_sa", "K_sab", "softmax"}));
  const Csv eval = read_csv(run_dir + "/eval.csv");
  ASSERT_FALSE(eval.rows.empty());
  EXPECT_EQ(eval.rows.back().at("step"), std::to_string(kSteps));
}

TEST_F(TrainCli, ResumeReproducesTheUninterruptedLosses) {
  const auto want = losses(reference_run(*this));
  const std::string b = path("b");
  RunResult r = run(tiny_run(b, {"--stop-at", "6"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(jacond::models::list_checkpoints(b).back().step, 6);
  // A flag typed with --resume overrides the checkpoint's config (--keep does not touch the losses).
  r = run({"train", "--resume", b, "--keep", "1"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "resuming")) << r.out;
  EXPECT_EQ(losses(b), want);
  const json config = json::parse(slurp(b + "/config.json"));
  EXPECT_EQ(config.at("keep"), 1);
  EXPECT_EQ(config.at("out_dir"), b);
  EXPECT_EQ(config.at("model").at("dim"), 16);
  EXPECT_EQ(jacond::models::list_checkpoints(b).size(), 1u);
  // The tracked conditioning after the resume is the same too.
  const Csv x = read_csv(reference_run(*this) + "/conditioning.csv"), y = read_csv(b + "/conditioning.csv");
  ASSERT_EQ(x.rows.size(), y.rows.size());
  for (size_t i = 0; i < x.rows.size(); ++i) EXPECT_EQ(x.rows[i].at("kappa"), y.rows[i].at("kappa")) << i;
  // And eval.csv, whose train_loss / train_acc average the epoch: the resume at step 6 of a 20-step
  // epoch carries the epoch's running sums in the checkpoint (they averaged steps 7–12 only before).
  const Csv e = read_csv(reference_run(*this) + "/eval.csv"), f = read_csv(b + "/eval.csv");
  ASSERT_EQ(e.rows.size(), f.rows.size());
  ASSERT_FALSE(e.rows.empty());
  for (size_t i = 0; i < e.rows.size(); ++i)
    for (const char* col : {"step", "test_loss", "test_acc", "train_loss", "train_acc"})
      EXPECT_EQ(e.rows[i].at(col), f.rows[i].at(col)) << col << " row " << i;
}

// --checkpoint-init writes step 0 (the initialisation) before the first update, --keep neither
// counts nor removes it, it changes nothing in the training (same losses as the reference run),
// a run resumed from it repeats the reference run without doubling step 0's tracking rows, and
// `jacond audit` of the run starts at step 0.
TEST_F(TrainCli, CheckpointInitKeepsStepZeroWhichResumesAndAudits) {
  const auto want = losses(reference_run(*this));
  const std::string d = path("d");
  RunResult r = run(tiny_run(d, {"--checkpoint-init", "true", "--keep", "1"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(losses(d), want);
  auto ckpts = jacond::models::list_checkpoints(d);
  ASSERT_EQ(ckpts.size(), 2u);
  EXPECT_EQ(ckpts[0].step, 0);
  EXPECT_EQ(ckpts[1].step, kSteps);
  const auto init = jacond::models::read_checkpoint(ckpts[0].dir);
  EXPECT_EQ(init.meta.at("epoch"), 0);
  EXPECT_TRUE(init.meta.at("metrics").at("loss").is_null());  // no step taken: no training loss
  EXPECT_TRUE(json::parse(slurp(d + "/config.json")).at("checkpoint_init").get<bool>());

  // Resume from step 0 (the flag alone means true): the reference run again, step 0 tracked once.
  const std::string e = path("e");
  auto stopped = tiny_run(e, {"--stop-at", "3", "--keep", "1"});
  stopped.push_back("--checkpoint-init");
  r = run(stopped);
  ASSERT_EQ(r.code, 0) << r.describe();
  ckpts = jacond::models::list_checkpoints(e);
  ASSERT_EQ(ckpts.size(), 2u);
  fs::remove_all(ckpts[1].dir);  // only step 0 left
  r = run({"train", "--resume", e});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "at step 0 of")) << r.out;
  EXPECT_EQ(losses(e), want);
  const Csv x = read_csv(reference_run(*this) + "/conditioning.csv"), y = read_csv(e + "/conditioning.csv");
  ASSERT_EQ(x.rows.size(), y.rows.size());
  for (size_t i = 0; i < x.rows.size(); ++i) {
    EXPECT_EQ(x.rows[i].at("step"), y.rows[i].at("step")) << i;
    EXPECT_EQ(x.rows[i].at("kappa"), y.rows[i].at("kappa")) << i;
  }

  // Asked for on the resume of a run that started without it: said, not silently ignored.
  const std::string f = path("f");
  r = run(tiny_run(f, {"--stop-at", "3"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  r = run({"train", "--resume", f, "--checkpoint-init", "true", "--stop-at", "4"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "note: --checkpoint-init: this run has no step-0 checkpoint")) << r.out;
  EXPECT_EQ(jacond::models::list_checkpoints(f).front().step, 3);

  // The audit of the run: step 0 and the last step; at step 0 `ours` makes every W^V W^O orthogonal.
  r = run({"audit", d, "--data-free", "--threads", "1", "--out", path("audit")});
  ASSERT_EQ(r.code, 0) << r.describe();
  std::set<std::string> steps;
  for (const auto& row : read_csv(path("audit") + "/audit.csv").rows) {
    steps.insert(row.at("step"));
    if (row.at("step") == "0" && row.at("matrix") == "W_VO") {
      EXPECT_NEAR(std::stod(row.at("kappa")), 1.0, 1e-4);
    }
  }
  EXPECT_EQ(steps, (std::set<std::string>{"0", std::to_string(kSteps)}));
}

// A resume may extend the run, move it and change what it logs and tracks, but not what it trains
// on or how: each such flag, typed with a different value, is a usage error that names the run's
// value, and config.json is left as it was (it described the whole run). --epochs on a run that
// counts --steps would be ignored, so it is refused too. Typing the saved value is accepted, except
// for the model's flags and --seed, which the checkpoint fixes.
TEST_F(TrainCli, AResumeRefusesToChangeWhatTheRunTrainsOnOrHow) {
  const std::string c = path("c");
  RunResult r = run(tiny_run(c, {"--stop-at", "3"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  const std::string config_before = slurp(c + "/config.json");
  const std::vector<std::pair<std::string, std::string>> changes = {
      {"--batch", "64"},         {"--lr", "0.5"},          {"--optimizer", "adamw"},   {"--augment", "false"},
      {"--token-graying", "dct"}, {"--data-limit", "320"}, {"--warmup-steps", "5"},    {"--weight-decay", "0.2"}};
  for (const auto& [flag, value] : changes) {
    SCOPED_TRACE(flag);
    r = expect_one_line_error({"train", "--resume", c, flag, value}, {flag, "differs from the run's", "start a new run"});
    EXPECT_EQ(r.code, 2);
  }
  r = expect_one_line_error({"train", "--resume", c, "--epochs", "3"}, {"--epochs", "counts --steps (12)", "--steps"});
  EXPECT_EQ(r.code, 2);
  // The model and the seed are the checkpoint's: refused whatever their value, and the message says so.
  for (const auto& flag : {"--dim", "--seed"}) {
    r = expect_one_line_error({"train", "--resume", c, flag, "0"}, {flag, "the checkpoint fixes the", "leave it out"});
    EXPECT_EQ(r.code, 2);
  }
  EXPECT_EQ(slurp(c + "/config.json"), config_before);
  r = run({"train", "--resume", c, "--batch", "32", "--stop-at", "4"});  // the saved value: accepted
  EXPECT_EQ(r.code, 0) << r.describe();
}

// A resume continues one run's past only. Refused into another run's directory (the two runs'
// logs and checkpoints interleaved), and from a checkpoint that later ones follow (retention keeps
// the highest steps: the resumed run's own checkpoints were pruned at once, and a later --resume
// loaded the abandoned future); such a checkpoint resumes into a new --out. --stop-at at or before
// the resumed step is a usage error (it was ignored: the run went to its end). A trailing slash on
// --resume continues in the run's directory (it continued inside the checkpoint's).
TEST_F(TrainCli, AResumeContinuesOneRunsPastOnly) {
  const std::string g = path("g"), h = path("h");
  ASSERT_EQ(run(tiny_run(g, {"--stop-at", "10", "--keep", "0", "--track-every", "0"})).code, 0);  // steps 5, 10
  ASSERT_EQ(run(tiny_run(h, {"--stop-at", "5", "--keep", "0", "--track-every", "0", "--seed", "1"})).code, 0);
  const std::string g_log = slurp(g + "/train_log.jsonl");
  RunResult r = expect_one_line_error({"train", "--resume", h + "/step-0000005", "--out", g}, {g, "checkpoints of another run"});
  EXPECT_EQ(r.code, 1);
  r = expect_one_line_error({"train", "--resume", g + "/step-0000005"}, {"past step 5", "step-0000010"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(slurp(g + "/train_log.jsonl"), g_log);
  EXPECT_EQ(jacond::models::list_checkpoints(g).size(), 2u);
  // A step set aside by a crash mid-replacement (.old-step-N, no step-N: the start renames it back)
  // is held too. It was restored after these checks: the resume from step 5 trained to 6 and left
  // step 10 the run's newest; a fresh run took another run's step 10 as its own. A refused run
  // moves nothing.
  fs::rename(g + "/step-0000010", g + "/.old-step-0000010.999");
  r = expect_one_line_error({"train", "--resume", g + "/step-0000005", "--stop-at", "6"}, {"past step 5", ".old-step-0000010.999"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(slurp(g + "/train_log.jsonl"), g_log);
  fs::create_directory(path("c"));
  fs::copy(g + "/.old-step-0000010.999", path("c") + "/.old-step-0000010.999", fs::copy_options::recursive);
  r = expect_one_line_error(tiny_run(path("c")), {path("c"), "already holds checkpoints"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(fs::exists(path("c") + "/.old-step-0000010.999/meta.json"));
  EXPECT_FALSE(fs::exists(path("c") + "/step-0000010"));
  fs::rename(g + "/.old-step-0000010.999", g + "/step-0000010");
  EXPECT_EQ(jacond::models::list_checkpoints(g).size(), 2u);
  r = run({"train", "--resume", g + "/step-0000005", "--out", path("branch"), "--stop-at", "7"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(jacond::models::list_checkpoints(path("branch")).back().step, 7);
  r = expect_one_line_error({"train", "--resume", g, "--stop-at", "10"}, {"--stop-at 10", "resumes at step 10"});
  EXPECT_EQ(r.code, 2);
  r = run({"train", "--resume", g + "/step-0000010/", "--stop-at", "11"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(jacond::models::list_checkpoints(g).back().step, 11);
  EXPECT_FALSE(fs::exists(g + "/step-0000010/config.json"));
  EXPECT_EQ(fs::path(json::parse(slurp(g + "/config.json")).at("out_dir").get<std::string>()).lexically_normal(),
            fs::path(g).lexically_normal());
}

// The last test evaluation travels in the checkpoint: a run resumed after an evaluation and
// stopped before the next writes the same metrics as the uninterrupted run (it wrote null).
TEST_F(TrainCli, AResumedRunKeepsItsLastEvaluation) {
  const std::vector<std::string> epochs_of_5{"--data-limit", "160", "--track-every", "0", "--keep", "0"};  // evaluates at 5, 10
  std::vector<std::string> straight = epochs_of_5, stopped = epochs_of_5;
  straight.insert(straight.end(), {"--stop-at", "7"});
  stopped.insert(stopped.end(), {"--stop-at", "6"});
  ASSERT_EQ(run(tiny_run(path("u"), straight)).code, 0);
  ASSERT_EQ(run(tiny_run(path("s"), stopped)).code, 0);
  const RunResult r = run({"train", "--resume", path("s"), "--stop-at", "7"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const json want = jacond::models::read_checkpoint(path("u") + "/step-0000007").meta.at("metrics");
  const json got = jacond::models::read_checkpoint(path("s") + "/step-0000007").meta.at("metrics");
  ASSERT_TRUE(want.at("test_loss").is_number()) << want.dump();
  EXPECT_EQ(got, want);
}

// --arch convmixer (the CNN control): trains, tracks its four token matrices per layer, records
// its own config in the checkpoint, and a run stopped and resumed repeats the uninterrupted
// losses exactly, so BatchNorm's running statistics travel in the checkpoint. Audit refuses it
// in one line (it analyses ViT blocks).
TEST_F(TrainCli, ConvMixerTrainsTracksAndResumes) {
  auto convmixer = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> a = {"--arch", "convmixer", "--dim", "8", "--patch", "4", "--kernel", "3", "--init", "timm",
                                  "--optimizer", "adamw", "--track-matrices", "all", "--augment", "false"};
    a.insert(a.end(), extra.begin(), extra.end());
    std::vector<std::string> args = tiny_run(out, a);
    const auto heads = std::find(args.begin(), args.end(), "--heads");  // a ConvMixer has none
    args.erase(heads, heads + 2);
    return args;
  };
  const std::string whole = path("cm-whole"), parts = path("cm-parts");
  RunResult r = run(convmixer(whole, {}));
  ASSERT_EQ(r.code, 0) << r.describe();
  r = run(convmixer(parts, {"--stop-at", "6"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  r = run({"train", "--resume", parts});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(losses(parts), losses(whole));
  // Training-mode BatchNorm uses the batch's statistics, so the losses alone would not notice lost
  // running statistics; evaluation and tracking (eval mode) would.
  const Csv eval_whole = read_csv(whole + "/eval.csv"), eval_parts = read_csv(parts + "/eval.csv");
  ASSERT_EQ(eval_whole.rows.size(), eval_parts.rows.size());
  EXPECT_EQ(eval_whole.rows.back().at("test_loss"), eval_parts.rows.back().at("test_loss"));
  const Csv cond = read_csv(whole + "/conditioning.csv"), cond_parts = read_csv(parts + "/conditioning.csv");
  ASSERT_EQ(cond.rows.size(), cond_parts.rows.size());
  for (size_t i = 0; i < cond.rows.size(); ++i) EXPECT_EQ(cond.rows[i].at("kappa"), cond_parts.rows[i].at("kappa")) << i;
  std::set<std::string> names;
  for (const auto& row : cond.rows) names.insert(row.at("matrix"));
  EXPECT_EQ(names, (std::set<std::string>{"X_in", "mix_out", "mix_block_out", "block_out"}));
  const auto last = jacond::models::list_checkpoints(whole).back();
  const json meta = json::parse(slurp(last.dir + "/meta.json"));
  EXPECT_EQ(meta.at("model").at("arch"), "convmixer");
  EXPECT_EQ(meta.at("model").at("skip"), "none");  // tiny_run's --skip none
  expect_one_line_error({"audit", last.dir}, {"convmixer", "ViT"});
  expect_one_line_error(convmixer(path("cm-bad"), {"--skip", "no-sab-skip"}), {"--arch", "full or none"});
  expect_one_line_error(convmixer(path("cm-bad"), {"--track-matrices", "K_sa"}), {"--track-matrices", "K_sa"});
  // A ViT flag would be ignored (--norm post trained the same ConvMixer, exit 0): usage errors
  // naming it, before any file; and the ConvMixer's --kernel with a ViT.
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--norm", "post"}, {"--heads", "2"}, {"--drop-path", "0.1"}, {"--mlp-ratio", "2"}, {"--alpha", "1"}}) {
    std::vector<std::string> args = convmixer(path("cm-vit"), {});
    args.insert(args.end(), {flag, value});
    const RunResult vit_flag = expect_one_line_error(args, {flag, "describes a ViT"});
    EXPECT_EQ(vit_flag.code, 2) << vit_flag.describe();
    EXPECT_FALSE(fs::exists(path("cm-vit"))) << flag;
  }
  const RunResult kernel = expect_one_line_error(tiny_run(path("vit-kernel"), {"--kernel", "3"}), {"--kernel", "--arch convmixer"});
  EXPECT_EQ(kernel.code, 2) << kernel.describe();
}

size_t losses_lines(const std::string& run) {
  std::ifstream in(run + "/train_log.jsonl");
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>(JACOND_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    FILE* f = std::freopen(log.c_str(), "a", stdout);
    (void)f;
    execv(JACOND_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

TEST_F(TrainCli, SigkillAtRandomMomentsThenResume) {
  const auto want = losses(reference_run(*this));
  const std::string c = path("c");
  // Kill moments: once the log reaches a random step, plus a random 0–40 ms, so kills land in
  // forward/backward, in optimizer steps and inside checkpoint writes (one per step here).
  // The kill moments are random on purpose; the seed is printed with any failure to replay them.
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("kill-moment seed " + std::to_string(seed) + " (std::mt19937)");
  std::mt19937 rng(seed);
  int kills = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const bool resume = !jacond::models::list_checkpoints(c).empty();
    const auto args = resume ? std::vector<std::string>{"train", "--resume", c} : tiny_run(c, {"--checkpoint-every", "1"});
    const size_t done_steps = losses_lines(c);
    const size_t target = std::min<size_t>(kSteps - 1, done_steps + std::uniform_int_distribution<size_t>(1, 4)(rng));
    const pid_t pid = spawn(args, path("c.log"));
    int status = 0;
    bool exited = false;
    while (!(exited = waitpid(pid, &status, WNOHANG) == pid) && losses_lines(c) < target)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (exited) break;  // finished before the kill
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 40)(rng)));
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ++kills;
    // Whatever the moment, every complete checkpoint reads back.
    for (const auto& e : jacond::models::list_checkpoints(c)) EXPECT_NO_THROW(jacond::models::read_checkpoint(e.dir)) << e.dir;
  }
  EXPECT_GE(kills, 1);
  const bool resume = !jacond::models::list_checkpoints(c).empty();
  const std::vector<std::string> fin = resume ? std::vector<std::string>{"train", "--resume", c} : tiny_run(c, {"--checkpoint-every", "1"});
  const auto done = jacond::models::list_checkpoints(c);
  if (!done.empty() && done.back().step == kSteps) {
    SUCCEED() << "run completed between kills";
  } else {
    const RunResult r = run(fin);
    ASSERT_EQ(r.code, 0) << "after " << kills << " kills\n" << r.describe();
  }
  std::cout << "killed " << kills << " times\n";
  EXPECT_EQ(losses(c), want) << "after " << kills << " kills";
  for (const auto& e : fs::directory_iterator(c)) EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u) << e.path();
}

TEST_F(TrainCli, AuditReadsTheCheckpointsAndAgreesWithTracking) {
  const std::string run_dir = reference_run(*this);
  RunResult r = run({"audit", run_dir, "--matrices", "K_sa,softmax", "--threads", "1", "--out", path("audit")});
  ASSERT_EQ(r.code, 0) << r.describe();
  const Csv audit = read_csv(path("audit") + "/audit.csv");
  const Csv tracked = read_csv(run_dir + "/conditioning.csv");
  std::set<std::string> steps;
  for (const auto& row : audit.rows) steps.insert(row.at("step"));
  EXPECT_EQ(steps, (std::set<std::string>{"5", "10", "12"}));
  int compared = 0;
  for (const auto& a : audit.rows) {
    if (a.at("step") != "12" || a.at("matrix") != "K_sa") continue;
    for (const auto& t : tracked.rows)
      if (t.at("step") == "12" && t.at("matrix") == "K_sa" && t.at("layer") == a.at("layer")) {
        EXPECT_NEAR(to_double(a.at("kappa")) / to_double(t.at("kappa")), 1.0, 1e-10) << "layer " << a.at("layer");
        ++compared;
      }
  }
  EXPECT_EQ(compared, 2);
  // --certify inertia: the same K_sa rows, certified by inertia counts, and their κ unchanged.
  r = run({"audit", run_dir, "--matrices", "K_sa", "--certify", "inertia", "--threads", "1", "--out", path("certified")});
  ASSERT_EQ(r.code, 0) << r.describe();
  int certified = 0;
  for (const auto& c : read_csv(path("certified") + "/audit.csv").rows) {
    SCOPED_TRACE("step " + c.at("step") + " layer " + c.at("layer") + ": " + c.at("note"));
    if (c.at("matrix") != "K_sa" || c.at("status") == "singular") continue;
    EXPECT_EQ(c.at("status"), "certified");
    EXPECT_LE(to_double(c.at("kappa_lo")), to_double(c.at("kappa")));
    EXPECT_GE(to_double(c.at("kappa_hi")), to_double(c.at("kappa")));
    for (const auto& a : audit.rows) {
      if (a.at("step") == c.at("step") && a.at("matrix") == "K_sa" && a.at("layer") == c.at("layer")) {
        EXPECT_NEAR(to_double(a.at("kappa")) / to_double(c.at("kappa")), 1.0, 1e-10);
      }
    }
    ++certified;
  }
  EXPECT_GE(certified, 2);
  // Data-free: weights only, from the checkpoint's model.safetensors as a plain file too.
  r = run({"audit", jacond::models::list_checkpoints(run_dir).back().dir + "/model.safetensors", "--data-free",
           "--out", path("free")});
  ASSERT_EQ(r.code, 0) << r.describe();
  const Csv free = read_csv(path("free") + "/audit.csv");
  std::set<std::string> names;
  for (const auto& row : free.rows) names.insert(row.at("matrix"));
  EXPECT_TRUE(names.count("W_VO") && names.count("W_QK_h") && names.count("W_1")) << r.out;
  // jacond plot: the run (loss, accuracy, κ per layer × step; run.json gives the caption) and
  // both audits, each recognised by its files. A copy of the run, so the shared one stays as trained.
  const std::string run_copy = path("run-copy");
  fs::copy(run_dir, run_copy, fs::copy_options::recursive);
  EXPECT_TRUE(fs::exists(run_copy + "/run.json"));
  r = run({"plot", run_copy, path("audit"), path("free"), "--format", "png"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(is_figure(run_copy + "/figures/training.png"));
  EXPECT_TRUE(is_figure(path("audit") + "/figures/audit.png"));
  EXPECT_TRUE(is_figure(path("free") + "/figures/audit.png"));
}

// --token-graying svd|dct: the run records it, and the probe the audit rebuilds from the checkpoint
// is grayed as the tracking probe was: κ of the first block's input tokens X_in agrees to 1e-10
// (a probe grayed on one side only differs by orders of magnitude). The same run without graying
// sees a different X_in, so the graying reached the network.
// A timm model whose Linears have no biases (qkv_bias=False, bias=False) stores no Linear .bias
// tensors: audited with data and data-free, it reads as the same model with those biases zero
// (timm_layout.h, fill_absent_biases), where it was refused ("missing key blocks.0.attn.qkv.bias",
// a review). The norms keep their biases (without one a norm may be an RMSNorm).
TEST_F(TrainCli, AModelWithoutBiasesAuditsAsItsZeroBiasTwin) {
  const std::string run_dir = reference_run(*this);
  const jacond::models::TensorMap trained =
      jacond::models::load_safetensors(jacond::models::list_checkpoints(run_dir).back().dir + "/model.safetensors");
  jacond::models::TensorMap zeroed, absent;
  int biases = 0;
  for (const auto& [key, tensor] : trained) {
    const bool bias = key.size() > 5 && key.compare(key.size() - 5, 5, ".bias") == 0 && key.find("norm") == std::string::npos;
    biases += bias;
    zeroed[key] = bias ? torch::zeros_like(tensor) : tensor;
    if (!bias) absent[key] = tensor;
  }
  ASSERT_EQ(biases, 2 * 4 + 2);  // qkv, proj, fc1, fc2 per block (depth 2), patch_embed, head
  jacond::models::save_safetensors(path("zeroed.safetensors"), zeroed);
  jacond::models::save_safetensors(path("absent.safetensors"), absent);
  for (const std::vector<std::string>& mode : {std::vector<std::string>{}, std::vector<std::string>{"--data-free"}}) {
    std::map<std::string, std::string> kappa;  // (matrix, layer, head, space) -> κ of the zeroed file
    for (const std::string name : {"zeroed", "absent"}) {
      std::vector<std::string> args = {"audit", path(name + ".safetensors"), "--heads", "2", "--threads", "1",
                                       "--out", path(name + "-audit")};
      args.insert(args.end(), mode.begin(), mode.end());
      if (mode.empty()) args.insert(args.end(), {"--matrices", "K_sa,K_sab,K_ffn"});
      const RunResult r = run(args);
      ASSERT_EQ(r.code, 0) << r.describe();
      const Csv audit = read_csv(path(name + "-audit") + "/audit.csv");
      ASSERT_FALSE(audit.rows.empty());
      for (const auto& row : audit.rows) {
        const std::string key = row.at("matrix") + "/" + row.at("layer") + "/" + row.at("head") + "/" + row.at("space");
        if (name == "zeroed") kappa[key] = row.at("kappa");
        else EXPECT_EQ(row.at("kappa"), kappa.at(key)) << key;
      }
      EXPECT_EQ(audit.rows.size(), kappa.size());
    }
  }
}

TEST_F(TrainCli, TokenGrayingIsRecordedAndReachesTrackingAndAudit) {
  const std::string plain = path("plain");
  const std::vector<std::string> common = {"--steps", "5", "--checkpoint-every", "5", "--track-every", "5",
                                           "--track-matrices", "X_in,K_ffn", "--augment", "false"};
  RunResult r = run(tiny_run(plain, common));
  ASSERT_EQ(r.code, 0) << r.describe();
  auto x_in = [](const Csv& csv, const std::string& step) {
    for (const auto& row : csv.rows)
      if (row.at("matrix") == "X_in" && row.at("layer") == "0" && row.at("step") == step) return to_double(row.at("kappa"));
    return std::nan("");
  };
  const double untouched = x_in(read_csv(plain + "/conditioning.csv"), "0");
  for (const std::string mode : {"svd", "dct"}) {
    SCOPED_TRACE(mode);
    const std::string grayed = path("tg-" + mode), audit = path("tg-audit-" + mode);
    std::vector<std::string> with = common;
    with.insert(with.end(), {"--token-graying", mode, "--tg-eps", "0.5"});
    r = run(tiny_run(grayed, with));
    ASSERT_EQ(r.code, 0) << r.describe();
    const json config = json::parse(slurp(grayed + "/config.json"));
    EXPECT_EQ(config.at("token_graying"), mode);
    EXPECT_EQ(config.at("tg_eps"), 0.5);
    r = run({"audit", grayed, "--matrices", "X_in", "--threads", "1", "--out", audit});
    ASSERT_EQ(r.code, 0) << r.describe();
    const double tracked = x_in(read_csv(grayed + "/conditioning.csv"), "5");
    const double audited = x_in(read_csv(audit + "/audit.csv"), "5");
    ASSERT_TRUE(std::isfinite(tracked) && std::isfinite(audited));
    EXPECT_NEAR(audited / tracked, 1.0, 1e-10);
    const double grayed_at_0 = x_in(read_csv(grayed + "/conditioning.csv"), "0");
    EXPECT_GT(std::abs(std::log(untouched / grayed_at_0)), 1e-3) << "graying changed nothing the network saw";
  }
}

// A post-norm ViT has no LayerNorm before its branches, so its blocks report K_sa, B_sa, E_sa,
// softmax and attention only: by default train tracks the per-head ones, and naming another matrix
// is an error (train: a usage error before training; audit: the checkpoint named), never a table
// silently without the rows asked for.
TEST_F(TrainCli, PostNormRunsTrackAndAuditTheirOwnMatricesAndRefuseOthers) {
  const std::string run_dir = path("post");
  std::vector<std::string> args = tiny_run(run_dir, {"--norm", "post", "--skip", "full", "--init", "timm",
                                                     "--steps", "5", "--checkpoint-every", "5"});
  const auto typed = std::find(args.begin(), args.end(), "--track-matrices");
  args.erase(typed, typed + 2);  // the default list
  RunResult r = run(args);
  ASSERT_EQ(r.code, 0) << r.describe();
  std::set<std::string> tracked;
  for (const auto& row : read_csv(run_dir + "/conditioning.csv").rows) tracked.insert(row.at("matrix"));
  EXPECT_EQ(tracked, (std::set<std::string>{"softmax", "attention"}));
  r = run({"audit", run_dir, "--matrices", "K_sa", "--threads", "1", "--out", path("post-audit")});
  ASSERT_EQ(r.code, 0) << r.describe();
  std::set<std::string> layers;
  for (const auto& row : read_csv(path("post-audit") + "/audit.csv").rows) {
    EXPECT_EQ(row.at("matrix"), "K_sa");
    layers.insert(row.at("layer"));
  }
  EXPECT_EQ(layers, (std::set<std::string>{"0", "1"}));
  r = expect_one_line_error({"audit", run_dir, "--matrices", "K_sa,K_ffn", "--out", path("post-ffn")},
                            {"step-0000005", "post-norm", "not K_ffn"}, path("post-ffn"));
  EXPECT_EQ(r.code, 1);
  r = expect_one_line_error(tiny_run(path("post-typed"), {"--norm", "post", "--track-matrices", "K_sab"}),
                            {"--track-matrices", "not K_sab"}, path("post-typed"));
  EXPECT_EQ(r.code, 2);
  // The model's tensors without jacond's config: the default 3 heads do not divide d = 16, and the
  // error says to pass --heads rather than blaming a --heads 3 nobody typed.
  const std::string bare = path("bare.safetensors");
  jacond::models::save_safetensors(bare, jacond::models::load_safetensors(run_dir + "/step-0000005/model.safetensors"));
  r = expect_one_line_error({"audit", bare, "--data-free", "--out", path("bare-audit")},
                            {"bare.safetensors", "no jacond config", "pass --heads"}, path("bare-audit"));
  EXPECT_EQ(r.code, 1);
  // With --heads it is audited, read as pre-norm unless --norm says post, and the assumption is
  // printed (it was silent: this post-norm model's blocks analysed with a LayerNorm in front).
  r = run({"audit", bare, "--data-free", "--heads", "2", "--threads", "1"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "bare.safetensors has no jacond config: read as pre-norm")) << r.out;
  EXPECT_TRUE(contains(r.out, "pass --norm post")) << r.out;
  r = run({"audit", bare, "--data-free", "--heads", "2", "--norm", "post", "--threads", "1"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_FALSE(contains(r.out, "read as pre-norm")) << r.out;
  // A checkpoint with its config is audited by its config; a typed --heads, --skip or --norm that
  // says otherwise (they describe config-less files, which one audit may list beside it) is noted.
  r = run({"audit", run_dir, "--data-free", "--heads", "4", "--norm", "pre", "--threads", "1"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "has jacond's config (heads 2); --heads 4 applies to files without one")) << r.out;
  EXPECT_TRUE(contains(r.out, "(norm post); --norm pre applies to files without one")) << r.out;
  EXPECT_TRUE(contains(r.out, "heads=2")) << r.out;  // what it analysed
  r = run({"audit", run_dir, "--data-free", "--heads", "2", "--norm", "post", "--threads", "1"});
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_FALSE(contains(r.out, "applies to files without one")) << r.out;
}

// What `audit --data-free` reads is the blocks, and it reads all of them as the file holds them
// (a review found each of these wrong):
// - a file without jacond's config needs --heads, whatever the width: the default 3 divides 384
//   and 768, and analysed timm's ViT-S/B as 3 heads, exit 0;
// - a headless backbone (num_classes=0: DINOv2, MAE) or one without a class token's position is
//   audited (it was refused for its head and pos_embed, which the weight reports never read);
// - a gap in the block indices is refused (blocks after it were silently dropped), as is a config
//   whose depth or width disagrees with the tensors;
// - run.json records the architecture each checkpoint was analysed as;
// - a checkpoint whose optimizer.pt was deleted is audited (it was skipped from a run, or refused);
// - an error among several checkpoints names the checkpoint.
TEST_F(TrainCli, ADataFreeAuditReadsTheBlocksTheFileHolds) {
  const std::string run_dir = reference_run(*this);  // d 16, depth 2, heads 2
  const std::string last = jacond::models::list_checkpoints(run_dir).back().dir;
  const jacond::models::TensorMap state = jacond::models::load_safetensors(last + "/model.safetensors");
  jacond::models::TensorMap blocks;
  for (const auto& [key, tensor] : state)
    if (key.rfind("blocks.", 0) == 0) blocks[key] = tensor;
  const std::string backbone = path("backbone.safetensors");
  jacond::models::save_safetensors(backbone, blocks);
  expect_one_line_error({"audit", backbone, "--data-free"}, {"backbone.safetensors", "no jacond config", "pass --heads"});
  RunResult r = run({"audit", backbone, "--data-free", "--heads", "2", "--threads", "1", "--out", path("backbone-audit")});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "d=16 depth=2 heads=2")) << r.out;
  EXPECT_FALSE(contains(r.out, "read with every skip connection")) << r.out;  // the weights do not depend on it
  const json record = json::parse(slurp(path("backbone-audit") + "/run.json"));
  ASSERT_EQ(record.at("architectures").size(), 1u);
  const json& model = record["architectures"][0].at("model");
  EXPECT_EQ(model.at("heads"), 2);
  EXPECT_EQ(model.at("depth"), 2);
  EXPECT_TRUE(model.at("image_size").is_null() && model.at("num_classes").is_null()) << model;  // never read
  // The same values as the checkpoint with its config, layer by layer.
  r = run({"audit", last, "--data-free", "--threads", "1", "--out", path("config-audit")});
  ASSERT_EQ(r.code, 0) << r.describe();
  const Csv with_config = read_csv(path("config-audit") + "/audit.csv");
  const Csv headless = read_csv(path("backbone-audit") + "/audit.csv");
  ASSERT_EQ(with_config.rows.size(), headless.rows.size());
  for (size_t i = 0; i < headless.rows.size(); ++i)
    EXPECT_EQ(headless.rows[i].at("kappa"), with_config.rows[i].at("kappa")) << headless.rows[i].at("matrix");

  jacond::models::TensorMap gap;  // blocks.0 and blocks.2
  for (const auto& [key, tensor] : blocks)
    if (key.rfind("blocks.1.", 0) == 0) gap["blocks.2." + key.substr(9)] = tensor;
    else gap[key] = tensor;
  jacond::models::save_safetensors(path("gap.safetensors"), gap);
  expect_one_line_error({"audit", path("gap.safetensors"), "--data-free", "--heads", "2"},
                        {"gap.safetensors", "blocks.2.", "no blocks.1."});
  jacond::models::save_safetensors(path("deeper.safetensors"), blocks, {{"config", R"({"dim": 16, "heads": 2, "depth": 3})"}});
  expect_one_line_error({"audit", path("deeper.safetensors"), "--data-free"}, {"deeper.safetensors", "depth 3", "blocks.1"});
  jacond::models::save_safetensors(path("wider.safetensors"), blocks, {{"config", R"({"dim": 32, "heads": 2, "depth": 2})"}});
  expect_one_line_error({"audit", path("wider.safetensors"), "--data-free"}, {"wider.safetensors", "dim 32", "16 entries"});

  const std::string stripped = path("stripped");  // a run whose optimizer states were deleted
  fs::copy(run_dir, stripped, fs::copy_options::recursive);
  size_t removed = 0;
  for (const auto& c : jacond::models::list_checkpoints(stripped)) removed += fs::remove(c.dir + "/optimizer.pt");
  ASSERT_EQ(removed, 3u);
  r = run({"audit", stripped, "--data-free", "--threads", "1", "--out", path("stripped-audit")});
  ASSERT_EQ(r.code, 0) << r.describe();
  std::set<std::string> steps;
  for (const auto& row : read_csv(path("stripped-audit") + "/audit.csv").rows) steps.insert(row.at("step"));
  EXPECT_EQ(steps.size(), 3u);
  // NaN in the last checkpoint: the error names it, not only the tensor.
  const std::string newest = jacond::models::list_checkpoints(stripped, jacond::models::CheckpointParts::kModel).back().dir;
  std::map<std::string, std::string> meta;
  jacond::models::TensorMap poisoned = jacond::models::load_safetensors(newest + "/model.safetensors", &meta);
  poisoned["blocks.1.attn.proj.weight"][0][0] = std::nan("");
  jacond::models::save_safetensors(newest + "/model.safetensors", poisoned, meta);
  r = run({"audit", stripped, "--data-free", "--threads", "1"});  // stderr: the progress lines, then the error
  EXPECT_EQ(r.code, 1) << r.describe();
  EXPECT_TRUE(contains(r.err, "error: " + newest + ": blocks.1.attn.proj.weight contains NaN")) << r.describe();
}

TEST_F(TrainCli, BadInputGivesOneLineErrors) {
  expect_one_line_error(tiny_run(path("x"), {"--skip", "sometimes"}), {"skip mode", "sometimes"});
  // A run that fails before writing leaves no --out behind, nor the parents it made for it, but
  // never a directory that was there before, however --out names it.
  expect_one_line_error(tiny_run(path("new/y"), {"--data-dir", path("nowhere")}), {"nowhere", "not found"}, path("new"));
  fs::create_directories(path("there"));
  expect_one_line_error(tiny_run(path("made/../there/y/"), {"--data-dir", path("nowhere")}), {"nowhere", "not found"},
                        path("there/y"));
  EXPECT_TRUE(fs::is_directory(path("there"))) << "an empty directory that existed was removed";
  EXPECT_FALSE(fs::exists(path("made")));
  expect_one_line_error({"train", "--resume", path("nothing")}, {"no complete checkpoint"});
  expect_one_line_error({"train", "--resume", reference_run(*this), "--dim", "32"}, {"--dim", "resuming"});
  expect_one_line_error(tiny_run(reference_run(*this)), {"already holds checkpoints"});
  expect_one_line_error({"audit", path("missing.safetensors")}, {"missing.safetensors", "no such file"});
  expect_one_line_error({"train", "--optimizer", "sgd", "--out", path("z")}, {"optimizer", "sgd"});
  expect_one_line_error({"train", "--token-graying", "fft", "--out", path("z")}, {"--token-graying", "fft"});
  expect_one_line_error({"train", "--tg-eps", "0", "--out", path("z")}, {"--tg-eps", "(0, 1]"});
  EXPECT_FALSE(fs::exists(path("z"))) << "a bad flag value must be rejected before the run directory is made";
  // A bad value typed with --resume is a usage error (2) naming the flag; the checkpoint's own
  // config is data.
  const RunResult bad_override = expect_one_line_error({"train", "--resume", reference_run(*this), "--warmup-steps", "-3"},
                                                       {"--warmup-steps", "must be >= 0"});
  EXPECT_EQ(bad_override.code, 2) << bad_override.describe();
  const RunResult model_flag = expect_one_line_error({"train", "--resume", reference_run(*this), "--heads", "4"}, {"--heads", "resuming"});
  EXPECT_EQ(model_flag.code, 2) << model_flag.describe();
  {
    std::ofstream(path("junk.safetensors")) << "junk";
  }
  expect_one_line_error({"audit", path("junk.safetensors"), "--data-free"}, {"junk.safetensors"});
  // --data-free reads the weights alone: a flag of the Jacobian route would be ignored (it was).
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--matrices", "K_sa"}, {"--method", "dense"}, {"--probe-size", "4"}, {"--certify", "inertia"}}) {
    const RunResult ignored = expect_one_line_error({"audit", reference_run(*this), "--data-free", flag, value, "--out", path("df")},
                                                    {flag, "--data-free"}, path("df"));
    EXPECT_EQ(ignored.code, 2) << ignored.describe();
  }
  // More probe images than the test split has: one line naming the flag (was LibTorch's narrow()
  // error with its C++ backtrace, 12 lines).
  expect_one_line_error({"audit", reference_run(*this), "--probe-size", "20000", "--matrices", "X_in"},
                        {"--probe-size 20000", "[1, 10000]"});
  // A malformed 'step' in a checkpoint's metadata names the file (was "error: stoll").
  std::string model;
  for (const auto& e : fs::directory_iterator(reference_run(*this)))
    if (e.path().filename().string().rfind("step-", 0) == 0) model = (e.path() / "model.safetensors").string();
  ASSERT_FALSE(model.empty());
  std::map<std::string, std::string> meta;
  const jacond::models::TensorMap state = jacond::models::load_safetensors(model, &meta);
  meta["step"] = "abc";
  jacond::models::save_safetensors(path("bad-step.safetensors"), state, meta);
  expect_one_line_error({"audit", path("bad-step.safetensors"), "--data-free"}, {"bad-step.safetensors", "'step'", "abc"});
}

// The data-parallel backend must fit the device: a usage error (2) naming the flag, before
// anything is read or written.
TEST_F(TrainCli, ADistBackendThatDoesNotFitTheDeviceIsAUsageError) {
  const RunResult r = expect_one_line_error({"train", "--dist-backend", "nccl", "--steps", "1", "--out", path("nccl-cpu")},
                                            {"--dist-backend nccl", "cpu"});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_FALSE(fs::exists(path("nccl-cpu")));
  EXPECT_EQ(expect_one_line_error({"train", "--dist-backend", "mpi", "--out", path("mpi")}, {"--dist-backend"}).code, 2);
}

// An optimizer value the user types must be a usable one: negative (the "optimizer's default"
// these fields hold internally) or non-finite is a usage error naming the flag, before any file.
// (--lr -1 ran with the default; --lr inf wrote checkpoints of inf weights and "lr": null.)
TEST_F(TrainCli, NegativeOrNonFiniteOptimizerValuesAreUsageErrors) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--lr", "-1"}, {"--beta1", "-0.5"}, {"--eps", "-1"}, {"--weight-decay", "-1"},
      {"--lr", "inf"}, {"--weight-decay", "nan"}, {"--clip-grad", "nan"}, {"--min-lr", "inf"}};
  for (const auto& [flag, value] : bad) {
    const RunResult r = expect_one_line_error({"train", flag, value, "--steps", "1", "--out", path("bad-opt")}, {flag, value});
    EXPECT_EQ(r.code, 2) << r.describe();
    EXPECT_FALSE(fs::exists(path("bad-opt"))) << flag << " " << value;
  }
}

// A model flag the chosen ViT ignores is a usage error naming it, before any file: --init timm
// trained its usual init with config.json saying "alpha": 5, and --skip none gave the same losses
// with --drop-path 0.5 as 0. A non-finite knob of `ours` names its flag (was exit 1, "init_block:
// alpha must be finite").
TEST_F(TrainCli, ModelFlagsTheModelIgnoresAreUsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--init", "timm", "--alpha", "5"}, {"--alpha", "--init ours", "timm ignores it"}},
      {{"--init", "mimetic", "--c", "2"}, {"--c", "--init ours", "mimetic"}},
      {{"--skip", "none", "--drop-path", "0.5"}, {"--drop-path", "--skip none"}},
      {{"--init", "ours", "--alpha", "nan"}, {"--alpha must be finite", "nan"}}};
  for (const auto& [flags, needles] : cases) {
    std::vector<std::string> args = {"train", "--steps", "1", "--out", path("ignored")};
    args.insert(args.end(), flags.begin(), flags.end());
    const RunResult r = expect_one_line_error(args, needles, path("ignored"));
    EXPECT_EQ(r.code, 2) << r.describe();
  }
}

// A step whose own loss is finite can leave NaN weights behind (AdamW at --lr 1e30: the first
// update is ±lr on every weight). The test loss is then the first to see it: exit 1 naming the test
// loss, its eval.csv row kept, and no checkpoint of the NaN weights (was: tracking failed with
// "tokens contain NaN or inf", or, without tracking, exit 0 and a checkpoint of NaN weights).
TEST_F(TrainCli, ALastStepThatDivergesStopsAtTheTestLoss) {
  for (const std::string track : {"5", "0"}) {
    const std::string run = path("diverged-" + track);
    const RunResult r = expect_one_line_error(
        tiny_run(run, {"--steps", "1", "--warmup-steps", "0", "--optimizer", "adamw", "--lr", "1e30", "--track-every", track}),
        {"test loss is", "step 1", "diverged"});
    EXPECT_EQ(r.code, 1) << r.describe();
    EXPECT_FALSE(fs::exists(run + "/step-0000001")) << "a checkpoint of the diverged weights was written";
    std::ifstream eval(run + "/eval.csv");
    std::string header, row;
    std::getline(eval, header), std::getline(eval, row);
    EXPECT_EQ(row.rfind("1,0,nan,", 0), 0u) << "eval.csv row: " << row;
  }
}

// A run saved before --dist-timeout was bounded (1e9 s) can hold 1e300 in its meta.json: its
// resume failed on that value even with --dist-timeout typed, a flag a resume may change. The typed
// value now replaces it; without one the error names the checkpoint's meta.json (bad data, exit 1).
TEST_F(TrainCli, ASavedValueBeyondTodaysBoundIsReplacedByAFlagAResumeMayChange) {
  const std::string run_dir = path("old-timeout");
  RunResult r = run(tiny_run(run_dir, {"--steps", "2", "--warmup-steps", "0", "--track-every", "0", "--checkpoint-every", "2"}));
  ASSERT_EQ(r.code, 0) << r.describe();
  const std::string meta_path = run_dir + "/step-0000002/meta.json";
  json meta = json::parse(slurp(meta_path));
  meta["train"]["dist_timeout"] = 1e300;
  std::ofstream(meta_path) << meta.dump();
  r = expect_one_line_error({"train", "--resume", run_dir, "--steps", "3"},
                            {"step-0000002/meta.json: the run's config", "--dist-timeout", "1e9"});
  EXPECT_EQ(r.code, 1) << r.describe();
  r = run({"train", "--resume", run_dir, "--steps", "3", "--dist-timeout", "60"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(jacond::models::list_checkpoints(run_dir).back().step, 3);
  EXPECT_EQ(json::parse(slurp(run_dir + "/config.json")).at("dist_timeout"), 60);
}

// --lr 3e38 is a finite positive rate, but AdamW's lr/(1 − β1) overflows fp32: the run stopped
// with LibTorch's "value cannot be converted to type float without overflow", naming neither the
// step nor the flag.
TEST_F(TrainCli, AnUpdateBeyondFp32NamesTheStepAndTheFlag) {
  const std::string run = path("overflow");
  const RunResult r = expect_one_line_error(
      tiny_run(run, {"--steps", "2", "--warmup-steps", "0", "--optimizer", "adamw", "--lr", "3e38", "--track-every", "0"}),
      {"step 1: the optimizer's update failed", "overflow", "--lr too large"});
  EXPECT_EQ(r.code, 1) << r.describe();
  EXPECT_FALSE(fs::exists(run + "/step-0000001"));
}

// A data-free name in --track-matrices is tracked, per layer from the weights (probe "none"),
// beside the block matrices: it was accepted and gave no row ("[track] step 0: 0 reports"). The
// oracle is the init: `ours` sets W^V = cU, W^O = cVᵀ, so κ(W^V W^O) = 1 at step 0 (fp32 weights).
TEST_F(TrainCli, ADataFreeMatrixIsTrackedPerLayerBesideTheBlockMatrices) {
  const std::string dir = path("track-wvo");
  const RunResult r = run(tiny_run(dir, {"--track-matrices", "W_VO,softmax", "--steps", "5", "--checkpoint-every", "0"}));
  ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  const Csv cond = read_csv(dir + "/conditioning.csv");
  std::set<std::pair<std::string, std::string>> weight_rows;  // (step, layer)
  int softmax_rows = 0;
  for (const auto& row : cond.rows) {
    SCOPED_TRACE(row.at("step") + " " + row.at("layer") + " " + row.at("matrix"));
    if (row.at("matrix") == "softmax") {
      ++softmax_rows;
      continue;
    }
    ASSERT_EQ(row.at("matrix"), "W_VO");
    EXPECT_EQ(row.at("probe"), "none");
    EXPECT_TRUE(weight_rows.insert({row.at("step"), row.at("layer")}).second) << "one row per (step, layer)";
    const double kappa = to_double(row.at("kappa"));
    if (row.at("step") == "0") EXPECT_NEAR(kappa, 1.0, 1e-5);
    else EXPECT_GT(kappa, 1.0 + 1e-5) << "the weights moved";
  }
  EXPECT_EQ(weight_rows.size(), 2u * 2u);  // steps 0 and 5, layers 0 and 1
  EXPECT_GT(softmax_rows, 0);
}

// Non-finite gradients stop the run before the optimizer sees them: SOAP's first eigh failed on
// them with LAPACK's "ill-conditioned" text (--c 1e20 overflows the attention logits), where AdamW
// stopped at the loss check after its step.
TEST_F(TrainCli, NonFiniteGradientsStopTheRunBeforeTheUpdate) {
  const std::string dir = path("c1e20");
  const RunResult r = expect_one_line_error(tiny_run(dir, {"--c", "1e20", "--steps", "3", "--track-every", "0"}),
                                            {"at step 1", "gradient norm", "diverged"});
  EXPECT_EQ(r.code, 1) << r.describe();
  EXPECT_EQ(r.err.find("eigh"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/step-0000001"));
}

// bench train against the Python PyTorch route (torch_train_route.py, Debian's python3-torch) on the
// CPU: both routes' rows, each with its optimizer.step() time inside its step time, and the split
// the GPU run needed (reports/gpu: jacond 0.92× PyTorch, with no way to say where the gap was).
TEST_F(TrainCli, BenchTrainTimesBothRoutesAndSplitsTheirSteps) {
  const RunResult r = run({"bench", "train", "--dim", "16", "--depth", "1", "--heads", "2", "--batch", "8", "--steps",
                           "2", "--warmup", "1", "--threads", "1", "--track-every", "0", "--out", path("bench")});
  ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  EXPECT_NE(r.out.find("where the step time goes (ms): optimizer.step() jacond "), std::string::npos) << r.out;
  const Csv csv = read_csv(path("bench") + "/bench_train.csv");
  for (const char* route : {"jacond", "pytorch"}) {
    const auto rows = csv.where("route", route);
    ASSERT_FALSE(rows.empty()) << route;
    const double step = to_double(rows.front()->at("step_s")), optimizer = to_double(rows.front()->at("optimizer_step_s"));
    EXPECT_GT(optimizer, 0) << route;
    EXPECT_LT(optimizer, step) << route;
    EXPECT_GE(to_double(rows.front()->at("page_faults_per_step")), 0) << route;  // a count, not nan
  }
  // The jacond process keeps freed tensors in its heap (analysis/core/heap_policy.h) and says so,
  // unless the environment sets the heap or a sanitizer's allocator serves the build.
  EXPECT_NE(r.out.find("minor page faults per step: jacond "), std::string::npos) << r.out;
  if (jacond::glibc_malloc_serves_this_build && !jacond::environment_sets_heap()) {
    const std::string heap = json::parse(slurp(path("bench") + "/run.json")).at("heap");
    EXPECT_EQ(heap.rfind("kept for reuse (mmap threshold ", 0), 0u) << heap;
  }
  // Both routes' ATen operations of one step, by name: the C++ model issues what the Python one
  // does (before at::linear and unbind it had 4 bias adds and 3 select_backward more a block).
  EXPECT_NE(r.out.find("ATen operations in one AdamW step (nested included): model pass jacond "), std::string::npos)
      << r.out;
  const json ops = json::parse(slurp(path("bench") + "/run.json")).at("aten_ops");
  const json &ours = ops.at("jacond").at("model"), &theirs = ops.at("pytorch").at("model");
  ASSERT_FALSE(ours.empty());
  ASSERT_FALSE(theirs.empty());
  EXPECT_FALSE(ops.at("jacond").at("optimizer").empty());
  EXPECT_FALSE(ops.at("jacond").at("soap_optimizer").empty());
  EXPECT_NE(r.out.find("; SOAP's optimizer.step() jacond "), std::string::npos) << r.out;
  std::set<std::string> names;
  for (const json* t : {&ours, &theirs})
    for (auto it = t->begin(); it != t->end(); ++it) names.insert(it.key());
  for (const std::string& name : names) {
    const int64_t j = ours.value(name, int64_t{0}), p = theirs.value(name, int64_t{0});
    EXPECT_LE(std::abs(j - p), std::max<int64_t>(3, p / 20)) << name << ": jacond " << j << ", PyTorch " << p;
  }
}

// Training on CUDA where this LibTorch has none (Debian's is CPU-only): exit 1 naming the flag,
// before any run directory or output is written; on a CUDA LibTorch with a GPU (the device
// tool's machine) the bench's tiny run goes through instead and writes its device, and a run moves
// between the devices when resumed (its optimizer state, SOAP's and AdamW's, is loaded onto the
// resuming run's device).
TEST_F(TrainCli, DeviceCudaTrainsThereOrSaysWhyNot) {
  const std::vector<std::string> train = {"train", "--device", "cuda", "--steps", "2", "--dim", "16", "--depth", "1",
                                          "--heads", "2", "--batch", "8", "--track-every", "0", "--out", path("cuda-run")};
  // --precondition-frequency 1: SOAP's GPU timing windows (bench_train_timing.h) are then one step, as 2 steps allow.
  const std::vector<std::string> bench = {"bench", "train", "--device", "cuda", "--dim", "16", "--depth", "1", "--heads",
                                          "2", "--batch", "8", "--steps", "2", "--warmup", "1", "--track-every", "0",
                                          "--precondition-frequency", "1", "--skip-python", "--out", path("cuda-bench")};
  if (!torch::cuda::is_available()) {
    EXPECT_FALSE(expect_gpu()) << "JACOND_EXPECT_GPU=1 and this LibTorch sees no CUDA device";
    const RunResult t = expect_one_line_error(train, {"--device cuda", "no CUDA device"});
    EXPECT_EQ(t.code, 1) << t.describe();
    const RunResult b = expect_one_line_error(bench, {"--device cuda", "no CUDA device"});
    EXPECT_EQ(b.code, 1) << b.describe();
    EXPECT_FALSE(fs::exists(path("cuda-bench") + "/bench_train.csv"));
    return;
  }
  const RunResult b = run(bench);
  ASSERT_TRUE(b.exited && b.code == 0) << b.describe();
  EXPECT_NE(slurp(path("cuda-bench") + "/bench_train.csv").find(",cuda,"), std::string::npos);
  for (const auto& [from, to, optimizer] : std::vector<std::array<std::string, 3>>{{"cuda", "cpu", "soap"},
                                                                                   {"cpu", "cuda", "adamw"}}) {
    const std::string dir = path(from + "-to-" + to);
    RunResult r = run(tiny_run(dir, {"--device", from, "--optimizer", optimizer, "--stop-at", "6"}));
    ASSERT_EQ(r.code, 0) << r.describe();
    const std::string first_out = r.out;
    r = run({"train", "--resume", dir, "--device", to});
    ASSERT_EQ(r.code, 0) << r.describe();
    EXPECT_EQ(jacond::models::list_checkpoints(dir).back().step, kSteps) << from << " to " << to;
    EXPECT_EQ(json::parse(slurp(dir + "/config.json")).at("device"), to);
    // Tracking runs where the run trains (select_track_devices): the full-space K_sa rows (N 272,
    // square: the GPU's dense route) of the steps trained on cuda say so in their method. The
    // CUDA module loaded (the log names the GPU, not the host, for the dense routes).
    const std::string tracked_there = "conditioning tracking of K_sa,K_sab: dense routes on ";
    EXPECT_EQ(first_out.find(tracked_there) != std::string::npos, from == "cuda") << first_out;
    EXPECT_EQ(r.out.find(tracked_there) != std::string::npos, to == "cuda") << r.out;
    EXPECT_EQ((first_out + r.out).find(tracked_there + "the host"), std::string::npos) << first_out << r.out;
    int k_sa_rows = 0;
    for (const auto& row : read_csv(dir + "/conditioning.csv").rows) {
      if (row.at("matrix") != "K_sa" || row.at("space") != "full") continue;
      ++k_sa_rows;
      const bool on_cuda = (std::stoi(row.at("step")) <= 6 ? from : to) == "cuda";
      const std::string& method = row.at("method");
      EXPECT_EQ(method.size() > 5 && method.substr(method.size() - 5) == "-cuda", on_cuda)
          << from << " to " << to << ", step " << row.at("step") << ": " << method;
    }
    EXPECT_EQ(k_sa_rows, 8) << "steps 0, 5, 10, 12, two layers";
  }
  // --track-device cpu: a cuda run tracks on the host.
  const RunResult host = run(tiny_run(path("cuda-host-tracking"), {"--device", "cuda", "--track-device", "cpu"}));
  ASSERT_EQ(host.code, 0) << host.describe();
  EXPECT_EQ(host.out.find("conditioning tracking"), std::string::npos) << host.out;
  for (const auto& row : read_csv(path("cuda-host-tracking") + "/conditioning.csv").rows)
    EXPECT_EQ(row.at("method").find("cuda"), std::string::npos) << row.at("matrix") << ": " << row.at("method");
}

}  // namespace
