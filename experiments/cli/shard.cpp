#include "experiments/cli/shard.h"

#include <stdexcept>

#include "experiments/cli/cli_common.h"

namespace jacond::cli {

std::pair<size_t, size_t> Shard::range(size_t total) const {
  const auto at = [&](int64_t i) { return static_cast<size_t>(static_cast<unsigned __int128>(total) * i / count); };
  return {at(index), at(index + 1)};
}

bool Shard::owns(size_t item, size_t total) const {
  const auto [begin, end] = range(total);
  return item >= begin && item < end;
}

Shard parse_shard(const std::string& spec) {
  if (spec.empty()) return {};
  const auto bad = [&] { return std::invalid_argument("must be I/N with 0 <= I < N, got '" + spec + "'"); };
  const auto slash = spec.find('/');
  if (slash == std::string::npos) throw bad();
  const std::optional<int64_t> index = parse_integer(spec.substr(0, slash)), count = parse_integer(spec.substr(slash + 1));
  if (!index || !count) throw bad();
  Shard s;
  s.index = *index;
  s.count = *count;
  if (s.count < 1 || s.index < 0 || s.index >= s.count) throw bad();
  s.given = true;
  return s;
}

nlohmann::json ShardRecord::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [k, n] : item_rows_) rows.push_back({k, n});
  return {{"index", shard_.index}, {"count", shard_.count}, {"items", total_}, {"item_rows", rows}};
}

}  // namespace jacond::cli
