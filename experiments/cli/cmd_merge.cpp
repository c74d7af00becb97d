// `jacond merge DIR... --out OUT`: joins the outputs of `jacond sweep --shard I/N` or `jacond
// audit --shard I/N` (experiments/cli/shard.h) into the table the unsharded command writes, row
// for row: the shards' rows put back in item order under the one header.
//
// Refused (exit 1, one line naming the shard): a shard without run.json (not finished), a
// directory that is not a shard, grids that differ (named setting), shard counts or item counts
// that differ, a shard given twice or missing, a table whose rows do not match its run.json.
#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"

namespace jacond::cli {

namespace po = boost::program_options;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct ShardOutput {
  std::string dir;
  json meta;  // run.json
  std::string header;
  std::vector<std::string> rows;
};

std::string read_text(const fs::path& path, const std::string& missing_hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": missing" + missing_hint);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// The table file a grid's command writes.
std::string table_name(const json& grid) {
  const std::string command = grid.value("command", "");
  if (command == "sweep") return "sweep.csv";
  if (command == "audit") return "audit.csv";
  throw std::runtime_error("run.json: grid of an unknown command '" + command + "'");
}

ShardOutput read_shard(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw std::runtime_error(dir + (fs::exists(dir) ? ": not a directory" : ": no such directory") +
                             " (give the shards' --out directories)");
  ShardOutput s;
  s.dir = dir;
  try {
    s.meta = json::parse(read_text(fs::path(dir) / "run.json", " (did the shard finish?)"));
  } catch (const json::exception& e) {
    throw std::runtime_error(dir + "/run.json: malformed: " + e.what());
  }
  if (!s.meta.contains("shard") || !s.meta.contains("grid"))
    throw std::runtime_error(dir + ": not a shard (run.json has no 'shard'; run sweep or audit with --shard I/N)");
  std::istringstream table(read_text(fs::path(dir) / table_name(s.meta["grid"]), ""));
  std::getline(table, s.header);
  for (std::string line; std::getline(table, line);)
    if (!line.empty()) s.rows.push_back(line);
  return s;
}

// The first setting in which two grids differ ("" when equal).
std::string first_difference(const json& a, const json& b) {
  std::set<std::string> keys;
  for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
  for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
  for (const auto& k : keys)
    if (!a.contains(k) || !b.contains(k) || a[k] != b[k]) return k;
  return "";
}

struct MergeArgs {
  std::vector<std::string> dirs;
  std::string out_dir;
};

std::optional<MergeArgs> parse_merge(int argc, char** argv) {
  MergeArgs a;
  po::options_description desc("jacond merge DIR... --out OUT: join `sweep --shard` / `audit --shard` outputs into one table");
  desc.add_options()("help,h", "this help")
      ("dirs", po::value(&a.dirs)->composing(), "the shards' output directories (positional)")
      ("out", po::value(&a.out_dir), "write OUT/sweep.csv (or audit.csv) and OUT/run.json");
  po::positional_options_description pos;
  pos.add("dirs", -1);
  if (!parse_options(argc, argv, desc, &pos)) return std::nullopt;
  check_usage([&] {
    if (a.dirs.empty()) throw std::invalid_argument("give the shards' directories (jacond merge DIR... --out OUT)");
    if (a.out_dir.empty()) throw std::invalid_argument("--out is required");
    for (const std::string& d : a.dirs) {  // the merged table would replace that shard's own
      std::error_code ec;
      if (fs::equivalent(d, a.out_dir, ec))
        throw std::invalid_argument("--out " + a.out_dir + " is the shard " + d + ": merge into a new directory");
    }
  });
  return a;
}

// The shards' rows put back in item order: rows_of_item[i] are the rows item i wrote, whichever
// shard ran it. Filled shard by shard (add), then checked complete (check_complete).
class ItemRows {
 public:
  explicit ItemRows(const ShardOutput& ref)
      : ref_(ref),
        count_(ref.meta["shard"].at("count").get<int64_t>()),
        rows_of_item_(ref.meta["shard"].at("items").get<size_t>()),
        seen_(rows_of_item_.size(), false) {}

  // Checks shard s against the first one (grid, shard and item counts, header; an index not
  // given before) and files its rows: run.json's item_rows lists [item, row count] in table order.
  void add(const ShardOutput& s) {
    check_same_run(s);
    const json& sh = s.meta["shard"];
    const int64_t index = sh.at("index").get<int64_t>();
    if (!index_dir_.emplace(index, s.dir).second)
      throw std::runtime_error(s.dir + ": shard " + std::to_string(index) + " is also " + index_dir_[index]);
    size_t next = 0;
    for (const auto& entry : sh.at("item_rows")) {
      const size_t item = entry.at(0).get<size_t>(), n = entry.at(1).get<size_t>();
      if (item >= rows_of_item_.size() || seen_[item] || next + n > s.rows.size())
        throw std::runtime_error(s.dir + ": run.json's item_rows do not match its table");
      seen_[item] = true;
      rows_of_item_[item].assign(s.rows.begin() + static_cast<std::ptrdiff_t>(next),
                                 s.rows.begin() + static_cast<std::ptrdiff_t>(next + n));
      next += n;
    }
    if (next != s.rows.size())
      throw std::runtime_error(s.dir + ": its table has " + std::to_string(s.rows.size()) + " rows, run.json accounts for " +
                               std::to_string(next));
  }

  void check_complete() const {
    std::string missing;
    for (int64_t i = 0; i < count_; ++i)
      if (!index_dir_.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    if (!missing.empty())
      throw std::runtime_error("shard(s) " + missing + " of " + std::to_string(count_) + " missing");
  }

  // The merged table, header first; *rows gets its row count.
  std::string table(size_t* rows) const {
    std::string text = ref_.header + "\n";
    *rows = 0;
    for (const auto& block : rows_of_item_)
      for (const auto& r : block) text += r + "\n", ++*rows;
    return text;
  }

  int64_t shard_count() const { return count_; }
  size_t item_count() const { return rows_of_item_.size(); }

 private:
  void check_same_run(const ShardOutput& s) const {
    if (const std::string k = first_difference(s.meta["grid"], ref_.meta["grid"]); !k.empty())
      throw std::runtime_error(s.dir + ": its grid differs from " + ref_.dir + "'s in '" + k + "'");
    const json& sh = s.meta["shard"];
    if (sh.at("count").get<int64_t>() != count_ || sh.at("items").get<size_t>() != rows_of_item_.size())
      throw std::runtime_error(s.dir + ": shard of " + sh.at("count").dump() + " over " + sh.at("items").dump() +
                               " items, but " + ref_.dir + " is one of " + std::to_string(count_) + " over " +
                               std::to_string(rows_of_item_.size()));
    if (s.header != ref_.header) throw std::runtime_error(s.dir + ": its table's header differs from " + ref_.dir + "'s");
  }

  const ShardOutput& ref_;
  int64_t count_;
  std::vector<std::vector<std::string>> rows_of_item_;
  std::vector<bool> seen_;
  std::map<int64_t, std::string> index_dir_;
};

}  // namespace

int run_merge(int argc, char** argv) {
  const std::optional<MergeArgs> parsed = parse_merge(argc, argv);
  if (!parsed) return 0;
  const MergeArgs& a = *parsed;
  check_output_directory(a.out_dir, "merge");
  std::vector<ShardOutput> shards;
  for (const auto& d : a.dirs) shards.push_back(read_shard(d));
  ItemRows merged(shards.front());
  for (const auto& s : shards) merged.add(s);
  merged.check_complete();

  size_t rows = 0;
  const std::string table = merged.table(&rows);
  const std::string name = table_name(shards.front().meta["grid"]);
  begin_output_set(a.out_dir);
  write_file_atomic(a.out_dir + "/" + name, table);
  json meta = run_metadata(argc, argv);
  meta["grid"] = shards.front().meta["grid"];
  meta["merged_from"] = a.dirs;
  meta["rows"] = rows;
  write_file_atomic(a.out_dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << a.out_dir << "/" << name << " (" << rows << " rows from " << merged.shard_count()
            << " shards over " << merged.item_count() << " items)\n";
  return 0;
}

}  // namespace jacond::cli
