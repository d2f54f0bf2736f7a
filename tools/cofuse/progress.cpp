#include "progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "measure/text.hpp"

namespace cofuse::cli {

namespace {

using measure::steady_seconds;

std::string clock_text(double s) {
  const int t = static_cast<int>(s + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%d:%02d", t / 60, t % 60);
  return text;
}

}  // namespace

Progress::Progress(int total, bool quiet, std::string command, std::string unit)
    : total_(total < 1 ? 1 : total), command_(std::move(command)), unit_(std::move(unit)), quiet_(quiet), tty_(isatty(STDERR_FILENO) != 0), start_(steady_seconds()) {}

Progress::~Progress() { finish(); }

void Progress::update(int done, double fraction, const std::string& what) {
  if (quiet_) return;
  const double now = steady_seconds(), elapsed = now - start_;
  const double part = (done + fraction) / total_;
  const std::string eta = part > 0.02 ? clock_text(elapsed / part - elapsed) : "?";
  if (!tty_) {
    // One line per finished step keeps logs short.
    if (done == 0 || done == last_logged_ || fraction > 0) return;
    last_logged_ = done;
    std::fprintf(stderr, "%s: [%d/%d] done: %s  (elapsed %s, left ~%s)\n", command_.c_str(), done, total_, what.c_str(),
                 clock_text(elapsed).c_str(), eta.c_str());
    return;
  }
  if (now - last_draw_ < 0.2 && done < total_) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(part * kWidth);
  std::string bar(static_cast<std::size_t>(kWidth), '.');
  for (int i = 0; i < filled && i < kWidth; ++i) bar[static_cast<std::size_t>(i)] = '#';
  std::fprintf(stderr, "\r\033[K[%s] %3.0f%%  %s %d/%d  %s  left ~%s", bar.c_str(), part * 100, unit_.c_str(),
               done + 1 > total_ ? total_ : done + 1, total_, what.c_str(), eta.c_str());
  std::fflush(stderr);
  open_ = true;
}

void Progress::finish() {
  if (open_) std::fputc('\n', stderr);
  open_ = false;
}

}  // namespace cofuse::cli
