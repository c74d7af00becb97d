// `jacond sweep --shard I/N`, `jacond audit --shard I/N` and `jacond merge` (experiments/cli/shard.h):
// the merged shards equal the unsharded table row for row (every column but the wall-clock
// `seconds`), whatever order the shards are given in; merge refuses what does not fit together.
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>

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
  // run.json's record of what each checkpoint was analysed as, as the unsharded audit's.
  EXPECT_EQ(json::parse(slurp(path("merged") + "/run.json")).at("architectures"),
            json::parse(slurp(path("whole") + "/run.json")).at("architectures"));
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
  const std::string table = slurp(dirs[2] + "/sweep.csv");  // its last row twice: one row run.json does not list
  std::ofstream(fs::path(dirs[2]) / "sweep.csv", std::ios::app) << table.substr(table.rfind('\n', table.size() - 2) + 1);
  expect_one_line_error({"merge", dirs[2], "--out", out}, {"accounts for"}, out);
}

// What an interrupted copy or an edited record leaves: refused in one line naming the shard, where
// merge once wrote a table with a row cut short, an item missing, or 0 shards (exit 0).
TEST_F(ShardCli, MergeRefusesDamagedShards) {
  const auto dirs = shards(kSweep, 2, "s");  // 18 items: shard 1 holds items 9..17
  const std::string out = path("merged");
  const auto copy_of = [&](const std::string& from, const std::string& name) {
    fs::copy(from, path(name), fs::copy_options::recursive);
    return path(name);
  };
  const auto edit_record = [&](const std::string& dir, const std::function<void(json&)>& edit) {
    json meta = json::parse(slurp(dir + "/run.json"));
    edit(meta);
    std::ofstream(dir + "/run.json", std::ios::trunc) << meta.dump(2);
  };
  const std::string table = slurp(dirs[1] + "/sweep.csv");
  {  // cut mid-row, as an interrupted copy leaves it
    const std::string d = copy_of(dirs[1], "cut");
    std::ofstream(d + "/sweep.csv", std::ios::trunc) << table.substr(0, table.size() - 60);
    expect_one_line_error({"merge", dirs[0], d, "--out", out}, {d + "/sweep.csv", "cut short"}, out);
  }
  {  // a row without its last field, newline and all
    const std::string d = copy_of(dirs[1], "short_row");
    std::ofstream(d + "/sweep.csv", std::ios::trunc) << table.substr(0, table.rfind(',')) << "\n";
    expect_one_line_error({"merge", dirs[0], d, "--out", out}, {d + "/sweep.csv:", "fields where the header has"}, out);
  }
  {  // the last item dropped from the table and the record alike
    const std::string d = copy_of(dirs[1], "gap");
    size_t rows_of_last = 0;
    edit_record(d, [&](json& m) {
      rows_of_last = m["shard"]["item_rows"].back()[1].get<size_t>();
      m["shard"]["item_rows"].erase(m["shard"]["item_rows"].size() - 1);
    });
    std::string cut = table;
    for (size_t i = 0; i < rows_of_last; ++i) cut = cut.substr(0, cut.rfind('\n', cut.size() - 2) + 1);
    std::ofstream(d + "/sweep.csv", std::ios::trunc) << cut;
    expect_one_line_error({"merge", dirs[0], d, "--out", out}, {d + ": run.json lists 8 items", "1/2 has 9"}, out);
  }
  {  // a note over two lines (csv_escape quotes it) is one row; the same cut inside its quotes is not
    const std::string d = copy_of(dirs[1], "multiline");
    const size_t first_row = table.find('\n') + 1, note = table.rfind(',', table.find('\n', first_row)) + 1;
    const std::string two_lines = table.substr(0, note) + "\"first line\nsecond line\"" + table.substr(table.find('\n', first_row));
    std::ofstream(d + "/sweep.csv", std::ios::trunc) << two_lines;
    const RunResult m = run({"merge", dirs[0], d, "--out", path("multiline_merged")});
    ASSERT_EQ(m.code, 0) << m.describe();
    EXPECT_NE(slurp(path("multiline_merged") + "/sweep.csv").find("\"first line\nsecond line\""), std::string::npos);
    std::ofstream(d + "/sweep.csv", std::ios::trunc) << two_lines.substr(0, note) << "\"first line\n";
    expect_one_line_error({"merge", dirs[0], d, "--out", out}, {d + "/sweep.csv", "quoted field is never closed"}, out);
  }
  {  // an index past the count, a count of 0, a field of the wrong type
    const std::string d = copy_of(dirs[1], "index");
    edit_record(d, [](json& m) { m["shard"]["index"] = 5; });
    expect_one_line_error({"merge", dirs[0], d, "--out", out}, {"shard 5 of 2 does not exist"}, out);
    const std::string z = copy_of(dirs[0], "zero");
    edit_record(z, [](json& m) { m["shard"]["count"] = 0; });
    expect_one_line_error({"merge", z, dirs[1], "--out", out}, {z + "/run.json", "a shard count of 0"}, out);
    const std::string t = copy_of(dirs[1], "typed");
    edit_record(t, [](json& m) { m["shard"]["index"] = "one"; });
    expect_one_line_error({"merge", dirs[0], t, "--out", out}, {t + "/run.json", "shard record is malformed"}, out);
    const std::string neg = copy_of(dirs[0], "negative");
    edit_record(neg, [](json& m) { m["shard"]["items"] = -1; });
    expect_one_line_error({"merge", neg, dirs[1], "--out", out}, {neg + "/run.json", "shard 'items' is -1, not a count"}, out);
    const std::string cmd = copy_of(dirs[0], "command");
    edit_record(cmd, [](json& m) { m["grid"]["command"] = 3; });
    expect_one_line_error({"merge", cmd, dirs[1], "--out", out}, {cmd + "/run.json", "command is malformed"}, out);
  }
}

// `--method auto` chooses by threads and memory too (run.json's auto_decisions); shards that chose
// differently would make a table no single run writes, so merge refuses them and says what to do.
// An explicit route records nothing to compare.
TEST_F(ShardCli, MergeRefusesShardsOnWhichAutoChoseDifferently) {
  const auto dirs = shards(kSweep, 2, "s");  // the default --method auto
  const json decisions = json::parse(slurp(dirs[0] + "/run.json")).at("auto_decisions");
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions.begin().key(), "n=8 d=16");
  EXPECT_NE(decisions.begin().value().get<std::string>().find("route="), std::string::npos) << decisions.dump();
  json other = json::parse(slurp(dirs[1] + "/run.json"));
  other["auto_decisions"]["n=8 d=16"] = "route=gkl";  // what another node could have chosen
  std::ofstream(dirs[1] + "/run.json", std::ios::trunc) << other.dump(2);
  const std::string out = path("merged");
  expect_one_line_error({"merge", dirs[0], dirs[1], "--out", out}, {"auto chose \"route=gkl\" at n=8 d=16", "explicit --method"}, out);
  // Explicit --method and --certify: nothing decided by auto, nothing recorded.
  const auto fixed = shards(with(kSweep, {"--method", "dense", "--certify", "none"}), 2, "f");
  EXPECT_FALSE(json::parse(slurp(fixed[0] + "/run.json")).contains("auto_decisions"));
  const RunResult m = run({"merge", fixed[0], fixed[1], "--out", path("fixed_merged")});
  EXPECT_EQ(m.code, 0) << m.describe();
  // A merge into a directory that held an earlier merge of the other command's shards leaves no
  // stale table there (a plot would draw it as this merge's).
  std::ofstream(path("fixed_merged") + "/audit.csv") << "checkpoint,step\nold,1\n";
  ASSERT_EQ(run({"merge", fixed[0], fixed[1], "--out", path("fixed_merged")}).code, 0);
  EXPECT_FALSE(fs::exists(path("fixed_merged") + "/audit.csv"));
  // A table that no merge wrote is not merge's to remove.
  fs::create_directories(path("theirs"));
  std::ofstream(path("theirs") + "/audit.csv") << "checkpoint,step\nmine,1\n";
  ASSERT_EQ(run({"merge", fixed[0], fixed[1], "--out", path("theirs")}).code, 0);
  EXPECT_TRUE(fs::exists(path("theirs") + "/audit.csv"));
}

// Shards of one table come from one jacond version: a shard whose record names another (rerun
// after an upgrade, or on a node with an older install) is refused by name. The source revision
// is HEAD when the shard ran, not the binary's, so shards at two revisions merge with a note, and
// run.json's shards_made_by lists both.
TEST_F(ShardCli, MergeRefusesShardsOfAnotherVersionAndRecordsTheirRevisions) {
  const auto dirs = shards(with(kSweep, {"--method", "dense", "--certify", "none"}), 2, "b");
  const json first = json::parse(slurp(dirs[0] + "/run.json"));
  json other = first;
  const auto rewrite = [&](const std::string& key, const json& value) {
    other = json::parse(slurp(dirs[1] + "/run.json"));
    other[key] = value;
    std::ofstream(dirs[1] + "/run.json", std::ios::trunc) << other.dump(2);
  };
  rewrite("jacond_version", "0.0.9");
  expect_one_line_error({"merge", dirs[0], dirs[1], "--out", path("versions")}, {dirs[1], "0.0.9", "one jacond version"},
                        path("versions"));
  rewrite("jacond_version", first.at("jacond_version"));
  rewrite("git_revision", "deadbee");
  const RunResult m = run({"merge", dirs[0], dirs[1], "--out", path("revisions")});
  ASSERT_EQ(m.code, 0) << m.describe();
  EXPECT_TRUE(contains(m.out, "note: the shards ran at 2 source revisions")) << m.out;
  const json made_by = json::parse(slurp(path("revisions") + "/run.json")).at("shards_made_by");
  EXPECT_EQ(made_by.at("git_revisions"), json::array({first.at("git_revision"), "deadbee"}));
  EXPECT_EQ(made_by.at("jacond_version"), first.at("jacond_version"));
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
