# Sourced first by the suite's shell tests: ctest ends a test that runs past
# its TIMEOUT with SIGKILL (CMake 3.25 has no TIMEOUT_SIGNAL_NAME), which no
# trap sees, and the test's fabric in /dev/shm, its network namespaces and a
# stopped rank stay behind for every later test.  Given LP_TEST_LIMIT
# (seconds, set by lp_limit_tests in the top CMakeLists.txt below the test's
# TIMEOUT), the script runs again under timeout(1), which sends SIGTERM to
# its process group first: the script's EXIT trap cleans up, and the test
# fails with status 124 and says so.  SIGKILL follows LP_TEST_KILL_AFTER
# seconds later.
if [ -n "${LP_TEST_LIMIT:-}" ] && [ -z "${LP_TEST_LIMITED:-}" ]; then
  export LP_TEST_LIMITED=1
  lp_limit_rc=0
  timeout --kill-after="${LP_TEST_KILL_AFTER:-10}" "$LP_TEST_LIMIT" bash "$0" "$@" || lp_limit_rc=$?
  if [ "$lp_limit_rc" = 124 ]; then
    echo "$(basename "$0"): still running after ${LP_TEST_LIMIT} s (LP_TEST_LIMIT, 3/4 of its ctest TIMEOUT): ended with SIGTERM" >&2
  fi
  exit "$lp_limit_rc"
fi
