// `jacond merge DIR... --out OUT`: joins the outputs of `jacond sweep --shard I/N` or `jacond
// audit --shard I/N` (experiments/cli/shard.h) into the table the unsharded command writes, row
// for row: the shards' rows put back in item order under the one header.
//
// Refused (exit 1, one line naming the shard): a shard without run.json (not finished), a
// directory that is not a shard, grids that differ (named setting), shard counts or item counts
// that differ, a shard given twice or missing, a shard whose items are not its own slice
// (shard.h), a table whose rows do not match its run.json, a table cut short (no final newline,
// or a row with fewer or more fields than the header: an interrupted copy from a cluster node),
// and shards whose `--method auto` / `--certify auto` chose differently (auto_decisions: the
// choice rests on threads and memory, which the grid leaves out).
#include <algorithm>
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
#include "experiments/cli/shard.h"
#include "models/io/error_text.h"

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
  throw std::runtime_error("run.json: grid of an unknown command '" + models::printable(command) + "'");
}

// One CSV record (RFC 4180, as csv_escape writes: a field in double quotes may hold commas and
// newlines, "" is a quote) and its field count.
struct CsvRecord {
  std::string text;  // without the record's final newline
  size_t fields = 1;
  size_t line = 1;   // the line it starts on
};

// The records of a table; a table cut short (an interrupted copy) is refused, not merged with its
// last row's missing fields read as NaN: no newline at its end, or a quote left open.
std::vector<CsvRecord> csv_records(const std::string& text, const std::string& path) {
  if (text.empty() || text.back() != '\n')
    throw std::runtime_error(path + ": cut short (no newline at its end): copy the shard again");
  std::vector<CsvRecord> records;
  CsvRecord r;
  bool quoted = false;
  size_t line = 1;
  for (char ch : text) {
    if (ch == '\n' && !quoted) {
      if (!r.text.empty()) records.push_back(r);
      r = CsvRecord{"", 1, ++line};
      continue;
    }
    if (ch == '\n') ++line;
    if (ch == '"') quoted = !quoted;
    else if (ch == ',' && !quoted) ++r.fields;
    r.text += ch;
  }
  if (quoted) throw std::runtime_error(path + ": cut short (a quoted field is never closed): copy the shard again");
  return records;
}

// The table's header and rows, each row with the header's field count.
void read_table(const fs::path& path, ShardOutput& s) {
  const std::vector<CsvRecord> records = csv_records(read_text(path, ""), path.string());
  if (records.empty()) throw std::runtime_error(path.string() + ": empty (no header)");
  s.header = records.front().text;
  for (size_t i = 1; i < records.size(); ++i) {
    if (records[i].fields != records.front().fields)
      throw std::runtime_error(path.string() + ":" + std::to_string(records[i].line) + ": " + std::to_string(records[i].fields) +
                               " fields where the header has " + std::to_string(records.front().fields));
    s.rows.push_back(records[i].text);
  }
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
    throw std::runtime_error(dir + "/run.json: malformed: " + models::json_error_text(e));
  }
  if (!s.meta.is_object() || !s.meta.contains("shard") || !s.meta.contains("grid") || !s.meta["grid"].is_object())
    throw std::runtime_error(dir + ": not a shard (run.json has no 'shard'; run sweep or audit with --shard I/N)");
  std::string table;
  try {
    table = table_name(s.meta["grid"]);
  } catch (const json::exception& e) {
    throw std::runtime_error(dir + "/run.json: its grid's command is malformed: " + models::json_error_text(e));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(dir + "/" + e.what());
  }
  read_table(fs::path(dir) / table, s);
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
      if (d.empty()) throw std::invalid_argument("a DIR argument is empty (jacond merge DIR... --out OUT)");
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
        rows_of_item_(count_of(ref, "items")),
        seen_(rows_of_item_.size(), false) {
    if (count_ < 1) throw std::runtime_error(ref.dir + "/run.json: a shard count of " + std::to_string(count_));
  }

  // Checks shard s against the first one (grid, shard and item counts, header; an index not
  // given before) and files its rows: run.json's item_rows lists [item, row count] in table order,
  // one entry for each item of the shard's slice, in order (Shard::range).
  void add(const ShardOutput& s) {
    check_same_run(s);
    add_decisions(s);
    const json& sh = s.meta["shard"];
    const int64_t index = sh.at("index").get<int64_t>();
    if (index < 0 || index >= count_)
      throw std::runtime_error(s.dir + ": shard " + std::to_string(index) + " of " + std::to_string(count_) + " does not exist");
    if (!index_dir_.emplace(index, s.dir).second)
      throw std::runtime_error(s.dir + ": shard " + std::to_string(index) + " is also " + index_dir_[index]);
    const auto [begin, end] = Shard{index, count_, true}.range(rows_of_item_.size());
    if (sh.at("item_rows").size() != end - begin)
      throw std::runtime_error(s.dir + ": run.json lists " + std::to_string(sh.at("item_rows").size()) + " items, shard " +
                               std::to_string(index) + "/" + std::to_string(count_) + " has " + std::to_string(end - begin));
    size_t next = 0, expected = begin;
    for (const auto& entry : sh.at("item_rows")) {
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_number_unsigned() || !entry[1].is_number_unsigned())
        throw std::runtime_error(s.dir + "/run.json: an item_rows entry " + models::json_snippet(entry) + " is not [item, rows]");
      const size_t item = entry[0].get<size_t>(), n = entry[1].get<size_t>();
      if (item != expected++ || n > s.rows.size() - next)
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
    for (size_t item = 0; item < seen_.size(); ++item)  // follows from the slices; kept as the merge's invariant
      if (!seen_[item]) throw std::runtime_error("item " + std::to_string(item) + " is in no shard's table");
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
  const json& auto_decisions() const { return decisions_; }

  // A count in the shard record: a non-negative integer (a negative one would wrap in size_t).
  static size_t count_of(const ShardOutput& s, const char* key) {
    const json& v = s.meta["shard"].at(key);
    if (!v.is_number_unsigned()) throw std::runtime_error(s.dir + "/run.json: shard '" + key + "' is " + models::json_snippet(v) + ", not a count");
    return v.get<size_t>();
  }
  size_t item_count() const { return rows_of_item_.size(); }

 private:
  void check_same_run(const ShardOutput& s) const {
    if (const std::string k = first_difference(s.meta["grid"], ref_.meta["grid"]); !k.empty())
      throw std::runtime_error(s.dir + ": its grid differs from " + ref_.dir + "'s in '" + models::printable(k) + "'");
    const json& sh = s.meta["shard"];
    if (sh.at("count").get<int64_t>() != count_ || count_of(s, "items") != rows_of_item_.size())
      throw std::runtime_error(s.dir + ": shard of " + models::json_snippet(sh.at("count")) + " over " + models::json_snippet(sh.at("items")) +
                               " items, but " + ref_.dir + " is one of " + std::to_string(count_) + " over " +
                               std::to_string(rows_of_item_.size()));
    if (s.header != ref_.header) throw std::runtime_error(s.dir + ": its table's header differs from " + ref_.dir + "'s");
    // One table, one jacond version: a shard rerun after an upgrade (or on a node with an older
    // install) would mix two versions of the algorithms in rows that read as one run's. The
    // revision is the source tree's HEAD when the shard ran (not the binary's), so a difference
    // there is recorded (shards_made_by), not refused.
    if (s.meta.value("jacond_version", json()) != ref_.meta.value("jacond_version", json()))
      throw std::runtime_error(s.dir + ": made by jacond " + models::json_snippet(s.meta.value("jacond_version", json())) +
                               ", " + ref_.dir + " by " + models::json_snippet(ref_.meta.value("jacond_version", json())) +
                               ": the shards of one table come from one jacond version (rerun them with one)");
  }

  // auto's choices, keyed by the size they were made for: two shards that chose differently at one
  // size (other --threads, or nodes with other memory) would give a table no single run writes.
  void add_decisions(const ShardOutput& s) {
    if (!s.meta.contains("auto_decisions")) return;
    for (const auto& [size, choice] : s.meta["auto_decisions"].items()) {
      if (!decisions_.contains(size)) {
        decisions_[size] = choice;
        decision_dir_[size] = s.dir;
      } else if (decisions_[size] != choice) {
        throw std::runtime_error(s.dir + ": auto chose " + models::json_snippet(choice) + " at " + models::printable(size) + " where " + decision_dir_[size] +
                                 " chose " + models::json_snippet(decisions_[size]) + " (other --threads or memory): rerun the shards "
                                 "with an explicit --method and --certify");
      }
    }
  }

  const ShardOutput& ref_;
  int64_t count_;
  std::vector<std::vector<std::string>> rows_of_item_;
  std::vector<bool> seen_;
  std::map<int64_t, std::string> index_dir_;
  json decisions_ = json::object();
  std::map<std::string, std::string> decision_dir_;
};

// A reused OUT that holds an earlier merge of the other command's shards: that merge's table goes
// with its run.json (begin_output_set), or a plot of OUT would read it as this merge's. Only a
// merge's: a table no jacond merge wrote is not ours to remove.
void remove_other_table(const std::string& out_dir, const std::string& name) {
  if (recorded_command(fs::path(out_dir) / "run.json") != "merge") return;
  remove_previous_files(out_dir, {name == "sweep.csv" ? "audit.csv" : "sweep.csv"});
}

}  // namespace

int run_merge(int argc, char** argv) {
  const std::optional<MergeArgs> parsed = parse_merge(argc, argv);
  if (!parsed) return 0;
  const MergeArgs& a = *parsed;
  check_output_directory(a.out_dir, "merge");
  std::vector<ShardOutput> shards;
  for (const auto& d : a.dirs) shards.push_back(read_shard(d));
  std::optional<ItemRows> filed;
  const ShardOutput* reading = &shards.front();
  try {
    filed.emplace(shards.front());
    for (const auto& s : shards) reading = &s, filed->add(s);
  } catch (const json::exception& e) {  // a field of the wrong type, or missing
    throw std::runtime_error(reading->dir + "/run.json: its shard record is malformed: " + models::json_error_text(e));
  }
  const ItemRows& merged = *filed;
  merged.check_complete();

  size_t rows = 0;
  const std::string table = merged.table(&rows);
  const std::string name = table_name(shards.front().meta["grid"]);
  remove_other_table(a.out_dir, name);  // before begin_output_set removes the record that says whose it is
  begin_output_set(a.out_dir);
  write_file_atomic(a.out_dir + "/" + name, table);
  json meta = run_metadata(argc, argv);
  meta["grid"] = shards.front().meta["grid"];
  if (!merged.auto_decisions().empty()) meta["auto_decisions"] = merged.auto_decisions();
  // Audit shards: the config each checkpoint was analysed with, in item order (shards by index;
  // their indices were validated by ItemRows).
  std::map<int64_t, const ShardOutput*> by_index;
  for (const auto& s : shards) by_index[s.meta["shard"]["index"].get<int64_t>()] = &s;
  json architectures = json::array();
  for (const auto& [index, s] : by_index)
    if (s->meta.contains("architectures") && s->meta["architectures"].is_array())
      for (const auto& entry : s->meta["architectures"]) architectures.push_back(entry);
  if (!architectures.empty()) meta["architectures"] = architectures;
  meta["merged_from"] = a.dirs;
  // The shards' jacond version (one, checked) and the source revisions they ran at, each once.
  json revisions = json::array();
  for (const auto& s : shards)
    if (const json r = s.meta.value("git_revision", json()); std::find(revisions.begin(), revisions.end(), r) == revisions.end())
      revisions.push_back(r);
  if (revisions.size() > 1)
    std::cout << "note: the shards ran at " << revisions.size() << " source revisions " << models::json_snippet(revisions)
              << " (one jacond version); run.json's shards_made_by lists them\n";
  meta["shards_made_by"] = {{"jacond_version", shards.front().meta.value("jacond_version", json())},
                            {"git_revisions", revisions}};
  meta["rows"] = rows;
  write_file_atomic(a.out_dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << a.out_dir << "/" << name << " (" << rows << " rows from " << merged.shard_count()
            << " shards over " << merged.item_count() << " items)\n";
  return 0;
}

}  // namespace jacond::cli
