// Every table `jacond bench` writes, whichever benchmark. The benchmarks share one record name
// (run.json, command "bench") and often one --out: a run removes them all with the record that
// described them (cli_common.h begin_output_set), or a table of another benchmark, or of this one
// run with other flags (peers, --compare-methods), would sit beside the new record and `jacond
// plot` would caption it with this run's command.
#pragma once

#include <string>
#include <vector>

namespace jacond::cli {

inline const std::vector<std::string>& bench_tables() {
  static const std::vector<std::string> tables = {
      "bench_dense.csv",           "bench_lanczos.csv", "bench_lanczos_peers.csv", "bench_lanczos_methods.csv",
      "bench_lanczos_trace.csv",   "bench_train.csv",   "bench_train_dp.csv"};
  return tables;
}

}  // namespace jacond::cli
