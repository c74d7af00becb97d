// Progress (analysis/core/progress.h) with a fake clock: the numbers it shows (count, rate, ETA),
// in-place lines on a terminal, rate-limited plain lines elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "analysis/core/progress.h"

namespace {

TEST(Progress, ShowsCountRateAndEtaFromTheClock) {
  double now = 100.0;
  std::ostringstream os;
  jacond::Progress p("sweep", 10, os, /*tty=*/false, /*log_every=*/0.0, [&] { return now; });
  now = 104.0;  // 4 s for the first 2 items: 0.5/s, 8 left → 16 s
  p.advance("alpha=2");
  p.advance("alpha=3");
  EXPECT_EQ(p.line("alpha=3"), "sweep 2/10  alpha=3  0.5/s  4.0s elapsed  ETA 16.0s");
  EXPECT_NE(os.str().find("sweep 2/10  alpha=3  0.5/s  4.0s elapsed  ETA 16.0s\n"), std::string::npos) << os.str();
}

TEST(Progress, PlainLinesAreRateLimitedButTheLastIsAlwaysShown) {
  double now = 0.0;
  std::ostringstream os;
  jacond::Progress p("audit", 5, os, /*tty=*/false, /*log_every=*/10.0, [&] { return now; });
  for (int i = 1; i <= 5; ++i) {
    now = 3.0 * i;  // items at 3, 6, 9, 12, 15 s: lines at 12 s (≥ 10 s since start) and the last
    p.advance();
  }
  const std::string out = os.str();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
  EXPECT_NE(out.find("audit 4/5"), std::string::npos) << out;
  EXPECT_NE(out.find("audit 5/5"), std::string::npos) << out;
  EXPECT_EQ(out.find("ETA", out.find("audit 5/5")), std::string::npos) << "no ETA once done: " << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
}

TEST(Progress, OnATerminalOneLineIsRewrittenAndEndedOnce) {
  double now = 0.0;
  std::ostringstream os;
  {
    jacond::Progress p("sweep", 3, os, /*tty=*/true, 10.0, [&] { return now; });
    now = 1.0;
    p.advance("a much longer detail text");
    now = 2.0;
    p.advance("short");
    p.finish();
    p.finish();  // idempotent, and the destructor adds nothing
  }
  const std::string out = os.str();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 2) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(out.back(), '\n');
  // The shorter second line is padded over the first's tail.
  const std::string second = out.substr(out.rfind('\r') + 1);
  const std::string first = out.substr(1, out.rfind('\r') - 1);
  EXPECT_GE(second.size() - 1, first.size()) << out;
}

TEST(Progress, FormatsDurationsForPeople) {
  EXPECT_EQ(jacond::format_seconds(12.34), "12.3s");
  EXPECT_EQ(jacond::format_seconds(245.0), "4m05s");
  EXPECT_EQ(jacond::format_seconds(3725.0), "1h02m");
}

}  // namespace
