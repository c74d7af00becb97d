// Sharded sweeps and audits for cluster job arrays: `--shard I/N` computes a deterministic slice
// of the command's items (sweep: grid points x seeds in the order of the unsharded run; audit:
// checkpoints), and `jacond merge DIR...` (cmd_merge.cpp) joins the shards' tables into the one
// the unsharded command writes, row for row.
//
// The slice: the T items are numbered 0..T-1 in the unsharded order; shard I of N takes the
// contiguous block [⌊I·T/N⌋, ⌊(I+1)·T/N⌋) (blocks keep neighbouring grid points together, which
// is what the Lanczos route's warm starts chain along).
//
// What a shard writes beside its table, in run.json:
//   "grid":  every setting that determines the table (not --out, --threads, --shard); merge
//            refuses shards whose grids differ and names the setting
//   "shard": {"index": I, "count": N, "items": T, "item_rows": [[k, rows of item k], ...]}
// With the dense routes every item's rows are a function of the item alone, so the merged table
// equals the unsharded one exactly; with --method lanczos each shard's warm-start chain starts
// afresh at its first item, so brackets may differ in the last digits (still valid brackets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace jacond::cli {

struct Shard {
  int64_t index = 0, count = 1;
  bool given = false;  // --shard was typed (even 0/1): the output is a shard, for merge
  bool active() const { return given; }
  /// The items [begin, end) of `total` that this shard computes.
  std::pair<size_t, size_t> range(size_t total) const;
  bool owns(size_t item, size_t total) const;
};

/// "I/N" with 0 <= I < N (Slurm: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT); "" is the whole
/// grid. std::invalid_argument otherwise (the caller prefixes the flag: parse_flag).
Shard parse_shard(const std::string& spec);

/// The rows each computed item contributed, in order, for run.json's "shard" record.
class ShardRecord {
 public:
  ShardRecord(const Shard& shard, size_t total) : shard_(shard), total_(total) {}
  void item(size_t k, size_t rows) { item_rows_.push_back({k, rows}); }
  nlohmann::json to_json() const;

 private:
  Shard shard_;
  size_t total_;
  std::vector<std::pair<size_t, size_t>> item_rows_;
};

}  // namespace jacond::cli
