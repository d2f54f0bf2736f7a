// A progress line on stderr for long runs (bench sweeps, profile): a redrawn bar on a terminal, one line per step
// otherwise (logs, CI), nothing when quiet. Rank 0 only draws; the others pass quiet.
#pragma once

#include <string>

namespace cofuse::cli {

class Progress {
 public:
  /// total: steps of the whole run; quiet: draw nothing; command: starts each logged line
  /// ("bench: ..."); unit: what a step is called on the bar ("case 3/10").
  Progress(int total, bool quiet, std::string command = "bench", std::string unit = "case");
  ~Progress();
  /// Step `done` of total is finished (or, with fraction, that far into step done + 1); `what`
  /// names the current case. Redraws at most every 0.2 s on a terminal.
  void update(int done, double fraction, const std::string& what);
  /// Ends the bar (a newline on a terminal).
  void finish();

 private:
  int total_;
  std::string command_, unit_;
  bool quiet_, tty_, open_ = false;
  double start_, last_draw_ = 0;
  int last_logged_ = -1;
};

}  // namespace cofuse::cli
