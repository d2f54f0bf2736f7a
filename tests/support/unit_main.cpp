// GoogleTest main of the unit tests: gtest's own, but a run whose every test was skipped exits
// 77 (skip_aware_main.hpp), so CTest reports an entry that selects hardware-bound tests alone
// (unit_bf16_onednn) as skipped where the hardware is missing.
#include <gtest/gtest.h>

#include "support/skip_aware_main.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return cofuse::test::exit_code_of_run(RUN_ALL_TESTS() != 0);
}
