// A one-line progress display for long work (sweeps, audits over many checkpoints): on a
// terminal one line rewritten in place,
//     "sweep 37/120  alpha=2 beta=0.6  1.8/s  20.4s elapsed  ETA 46.0s"
// and, when the stream is not a terminal (CI logs, pipes, files), the same text as plain lines,
// at most one per `log_every` seconds plus the last, so a log stays readable and short.
// The rate is items per second since the start; ETA = (total − done) / rate.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <string>

namespace jacond {

class Progress {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic
  /// `tty`: rewrite one line ("\r…") or print log lines. The default clock is steady_clock.
  Progress(std::string label, size_t total, std::ostream& os, bool tty, double log_every = 10.0, Clock clock = {});
  /// To std::cerr, in place when stderr is a terminal (returned by guaranteed elision).
  static Progress on_stderr(std::string label, size_t total);

  /// One (or n) more items done; `detail` names the item ("alpha=2 beta=0.6").
  void advance(const std::string& detail = "", size_t n = 1);
  /// Ends the in-place line with a newline (idempotent; the destructor calls it).
  void finish();
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// The text of the current state, without "\r" or newline (what a line shows).
  std::string line(const std::string& detail) const;

 private:
  std::string label_;
  size_t total_, done_ = 0;
  std::ostream* os_;
  bool tty_, finished_ = false;
  double log_every_, start_, last_log_;
  Clock clock_;
  size_t last_width_ = 0;
};

/// "12.3s", "4m05s", "1h02m": a duration for people.
std::string format_seconds(double seconds);

}  // namespace jacond
