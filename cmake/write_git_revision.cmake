# Run at every build (cmake -P): writes OUT with the git revision of SOURCE_DIR, marked -dirty
# when tracked files differ from it, and touches OUT only when that changes, so a commit
# recompiles one file and every record names the code that really ran.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR NOT revision)
  set(revision "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY "${SOURCE_DIR}"
                  OUTPUT_VARIABLE changes ERROR_QUIET)
  if(changes)
    string(APPEND revision "-dirty")
  endif()
endif()
set(content "// Generated at build time by cmake/write_git_revision.cmake; do not edit.\n#pragma once\n#define COFUSE_BUILD_GIT_REVISION \"${revision}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
