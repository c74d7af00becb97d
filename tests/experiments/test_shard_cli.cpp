// `jacond sweep --shard I/N`, `jacond audit --shard I/N` and `jacond merge` (experiments/cli/shard.h):
// the merged shards equal the unsharded table row for row (every column but the wall-clock
// `seconds`), whatever order the shards are given in; merge refuses what does not fit together.
#include <nlohmann/json.hpp>

#include "support/cli_harness.h"

using namespace jacond::test::cli;
using json = nlohmann::json;

namespace {

const std::vector<std::string> kSweep{"sweep", "--alpha", "0:2:1", "--beta", "0:1:0.5", "--seeds", "2", "--n", "8",
                                      "--d", "16", "--threads", "1"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& extra) {
  base.insert(base.end(), extra.begin(), extra.end());
  return base;
}

// The table with its `seconds` column (wall-clock time, the one column that may differ) blanked.
std::vector<std::map<std::string, std::string>> without_timing(const Csv& csv) {
  auto rows = csv.rows;
  for (auto& r : rows) r.erase("seconds");
  return rows;
}

class ShardCli : public CliFixture {
 protected:
  // Runs `args --shard i/n --out DIR` for every i; returns the directories.
  std::vector<std::string> shards(const std::vector<std::string>& args, int n, const std::string& prefix) {
    std::vector<std::string> dirs;
    for (int i = 0; i < n; ++i) {
      dirs.push_back(path(prefix + std::to_string(i)));
      const RunResult r = run(with(args, {"--shard", std::to_string(i) + "/" + std::to_string(n), "--out", dirs.back()}));
      EXPECT_EQ(r.code, 0) << r.describe();
    }
    return dirs;
  }
};

}  // namespace

TEST_F(ShardCli, MergedSweepShardsEqualTheUnshardedSweep) {
  ASSERT_EQ(run(with(kSweep, {"--out", path("whole")})).code, 0);
  const Csv whole = read_csv(path("whole") + "/sweep.csv");
  ASSERT_EQ(whole.rows.size(), 18u * 5u);  // 3 alphas x 3 betas x 2 seeds, 5 matrices each
  for (int n : {1, 4, 7}) {
    auto dirs = shards(kSweep, n, "s" + std::to_string(n) + "_");
    std::reverse(dirs.begin(), dirs.end());  // the order given does not matter
    const RunResult m = run(with(with({"merge"}, dirs), {"--out", path("m" + std::to_string(n))}));
    ASSERT_EQ(m.code, 0) << m.describe();
    const Csv merged = read_csv(path("m" + std::to_string(n)) + "/sweep.csv");
    EXPECT_EQ(merged.header, whole.header);
    EXPECT_EQ(without_timing(merged), without_timing(whole)) << n << " shards";
    const json meta = json::parse(slurp(path("m" + std::to_string(n)) + "/run.json"));
    EXPECT_EQ(meta.at("rows"), whole.rows.size());
  }
  // 18 items over 4 shards: contiguous blocks of 4, 5, 4, 5.
  const json meta = json::parse(slurp(path("s4_1") + "/run.json"));
  EXPECT_EQ(meta.at("shard").at("item_rows").size(), 5u);
  EXPECT_EQ(meta.at("shard").at("item_rows")[0][0], 4);
}

TEST_F(ShardCli, MergedAuditShardsEqualTheUnshardedAudit) {
  const RunResult t = run({"train", "--dim", "16", "--depth", "2", "--heads", "2", "--patch", "7", "--batch", "32",
                           "--data-limit", "320", "--test-limit", "100", "--threads", "1", "--steps", "6",
                           "--checkpoint-every", "2", "--keep", "0", "--track-every", "0", "--out", path("run")});
  ASSERT_EQ(t.code, 0) << t.describe();
  const std::vector<std::string> audit{"audit", path("run"), "--matrices", "K_ffn,softmax", "--method", "dense", "--threads", "1"};
  ASSERT_EQ(run(with(audit, {"--out", path("whole")})).code, 0);
  const Csv whole = read_csv(path("whole") + "/audit.csv");
  ASSERT_FALSE(whole.rows.empty());
  const auto dirs = shards(audit, 2, "a");
  const RunResult m = run({"merge", dirs[1], dirs[0], "--out", path("merged")});
  ASSERT_EQ(m.code, 0) << m.describe();
  const Csv merged = read_csv(path("merged") + "/audit.csv");
  EXPECT_EQ(without_timing(merged), without_timing(whole));
  std::set<std::string> checkpoints;
  for (const auto& r : merged.rows) checkpoints.insert(r.at("checkpoint"));
  EXPECT_EQ(checkpoints.size(), 3u);
}

TEST_F(ShardCli, MergeRefusesShardsThatDoNotFit) {
  const auto dirs = shards(kSweep, 3, "s");
  const std::string out = path("merged");
  expect_one_line_error({"merge", dirs[0], dirs[2], "--out", out}, {"shard(s) 1 of 3 missing"}, out);
  expect_one_line_error({"merge", dirs[0], dirs[1], dirs[1], dirs[2], "--out", out}, {"shard 1 is also"}, out);
  // --out one of the shards: the merged table would replace that shard's own (usage, nothing written).
  const std::string before = slurp(dirs[0] + "/sweep.csv");
  EXPECT_EQ(expect_one_line_error({"merge", dirs[0], dirs[1], dirs[2], "--out", dirs[0]}, {"--out", "is the shard"}).code, 2);
  EXPECT_EQ(slurp(dirs[0] + "/sweep.csv"), before);
  // Another grid (3 seeds), as shard 1 of 3.
  auto three_seeds = kSweep;
  *(std::find(three_seeds.begin(), three_seeds.end(), "--seeds") + 1) = "3";
  ASSERT_EQ(run(with(three_seeds, {"--shard", "1/3", "--out", path("other")})).code, 0);
  expect_one_line_error({"merge", dirs[0], path("other"), dirs[2], "--out", out}, {"grid differs", "'seeds'"}, out);
  // Another shard count over the same grid.
  ASSERT_EQ(run(with(kSweep, {"--shard", "1/4", "--out", path("quarter")})).code, 0);
  expect_one_line_error({"merge", dirs[0], path("quarter"), dirs[2], "--out", out}, {"shard of 4"}, out);
  // An unsharded output, an unfinished shard, a table cut short.
  ASSERT_EQ(run(with(kSweep, {"--out", path("whole")})).code, 0);
  expect_one_line_error({"merge", path("whole"), "--out", out}, {"not a shard"}, out);
  // A file or a missing path where a shard's directory goes: named as such.
  expect_one_line_error({"merge", path("whole") + "/sweep.csv", "--out", out}, {"sweep.csv: not a directory"}, out);
  expect_one_line_error({"merge", path("nowhere"), "--out", out}, {"nowhere: no such directory"}, out);
  fs::remove(fs::path(dirs[1]) / "run.json");
  expect_one_line_error({"merge", dirs[0], dirs[1], dirs[2], "--out", out}, {"run.json", "did the shard finish"}, out);
  std::ofstream(fs::path(dirs[2]) / "sweep.csv", std::ios::app) << "an,extra,row\n";
  expect_one_line_error({"merge", dirs[2], "--out", out}, {"accounts for"}, out);
}

TEST_F(ShardCli, BadShardFlagsAreUsageErrors) {
  for (const std::string spec : {"4/4", "-1/2", "1/0", "1", "a/b", "1/2x"}) {
    const RunResult r = expect_one_line_error(with(kSweep, {"--shard", spec, "--out", path("x")}), {"--shard: must be I/N", spec}, path("x"));
    EXPECT_EQ(r.code, 2) << spec;
  }
  EXPECT_EQ(expect_one_line_error({"audit", "nowhere", "--shard", "2/2"}, {"--shard"}).code, 2);
  EXPECT_EQ(expect_one_line_error({"merge", path("x")}, {"--out"}).code, 2);
  EXPECT_EQ(expect_one_line_error({"merge", "--out", path("x")}, {"jacond merge DIR"}).code, 2);
}
