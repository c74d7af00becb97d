#include "analysis/core/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace jacond {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::string format_seconds(double s) {
  char buf[32];
  if (!std::isfinite(s)) return "?";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) % 3600 / 60);
  return buf;
}

Progress::Progress(std::string label, size_t total, std::ostream& os, bool tty, double log_every, Clock clock)
    : label_(std::move(label)), total_(total), os_(&os), tty_(tty), log_every_(log_every),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)) {
  start_ = clock_();
  last_log_ = start_;
}

Progress Progress::on_stderr(std::string label, size_t total) {
  return Progress(std::move(label), total, std::cerr, ::isatty(STDERR_FILENO) == 1);
}

std::string Progress::line(const std::string& detail) const {
  const double elapsed = clock_() - start_;
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  std::ostringstream os;
  os << label_ << " " << done_ << "/" << total_;
  if (!detail.empty()) os << "  " << detail;
  char r[32];
  std::snprintf(r, sizeof r, "%.3g/s", rate);
  os << "  " << r << "  " << format_seconds(elapsed) << " elapsed";
  if (done_ < total_) os << "  ETA " << (rate > 0 ? format_seconds(static_cast<double>(total_ - done_) / rate) : "?");
  return os.str();
}

void Progress::advance(const std::string& detail, size_t n) {
  done_ += n;
  const double now = clock_();
  if (tty_) {
    const std::string text = line(detail);
    // Pad over the previous line's tail so a shorter line leaves no debris.
    *os_ << "\r" << text << std::string(last_width_ > text.size() ? last_width_ - text.size() : 0, ' ') << std::flush;
    last_width_ = text.size();
  } else if (now - last_log_ >= log_every_ || done_ >= total_) {
    *os_ << line(detail) << "\n" << std::flush;
    last_log_ = now;
  }
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_ && last_width_ > 0) *os_ << "\n" << std::flush;
}

Progress::~Progress() { finish(); }

}  // namespace jacond
