// The stop flag of core/stop_signals.hpp: SIGTERM and a first Ctrl-C set it
// to their number, a second Ctrl-C takes SIGINT's default action, a SIGINT
// ignored at start stays ignored, releasing before the final evaluation
// restores both defaults, and a process a Ctrl-C stopped dies of SIGINT. Each case runs in a child process, as a death test
// (the flag and the signal dispositions are per process), and reports which
// check failed by its exit code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>

#include "core/stop_signals.hpp"

namespace forge {
namespace {

// The threadsafe style re-runs this test alone in a fresh process (the
// "fast" one forks a process that holds the other tests' worker threads).
void threadsafe_death_tests() { ::testing::GTEST_FLAG(death_test_style) = "threadsafe"; }

sighandler_t disposition(int sig) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

TEST(StopSignals, SigtermSetsTheFlagAndExits143) {
  threadsafe_death_tests();
  const auto body = [] {
    volatile std::sig_atomic_t* flag = catch_stop_signals();
    if (*flag != 0) return 10;
    raise(SIGTERM);
    if (*flag != SIGTERM) return 11;
    if (stop_signal_name() != "SIGTERM") return 12;
    return stopped_exit_code() == 143 ? 0 : 13;
  };
  EXPECT_EXIT(_exit(body()), ::testing::ExitedWithCode(0), "");
}

TEST(StopSignals, AFirstCtrlCStopsGracefullyASecondAtOnce) {
  threadsafe_death_tests();
  const auto body = [] {
    std::signal(SIGINT, SIG_DFL);  // as from a terminal, whatever started this binary
    // The handler's line goes to stderr; keep the test's output clean.
    if (!freopen("/dev/null", "w", stderr)) return 9;
    volatile std::sig_atomic_t* flag = catch_stop_signals();
    if (disposition(SIGINT) == SIG_DFL || disposition(SIGINT) == SIG_IGN) return 8;  // caught
    raise(SIGINT);
    if (*flag != SIGINT) return 10;
    if (stop_signal_name() != "SIGINT (Ctrl-C)") return 11;
    if (stopped_exit_code() != 130) return 12;
    raise(SIGTERM);  // a later SIGTERM keeps the first signal's code
    if (*flag != SIGINT) return 13;
    if (disposition(SIGINT) != SIG_DFL) return 14;
    raise(SIGINT);  // the second: default action, the child dies here
    return 15;
  };
  EXPECT_EXIT(_exit(body()), ::testing::KilledBySignal(SIGINT), "");
}

TEST(StopSignals, ASigintIgnoredAtStartStaysIgnored) {
  threadsafe_death_tests();
  const auto body = [] {
    std::signal(SIGINT, SIG_IGN);  // as sh starts a background job
    volatile std::sig_atomic_t* flag = catch_stop_signals();
    if (disposition(SIGINT) != SIG_IGN) return 10;
    raise(SIGINT);
    if (*flag != 0) return 11;
    stop_signal_before_final_evaluation("run", false);
    return disposition(SIGINT) == SIG_IGN ? 0 : 12;
  };
  EXPECT_EXIT(_exit(body()), ::testing::ExitedWithCode(0), "");
}

TEST(StopSignals, ReleasingBeforeTheFinalEvaluationRestoresTheDefaults) {
  threadsafe_death_tests();
  const auto body = [] {
    std::signal(SIGINT, SIG_DFL);  // as from a terminal, whatever started this binary
    catch_stop_signals();
    if (stop_signal_before_final_evaluation("run", false)) return 10;  // none caught
    if (disposition(SIGTERM) != SIG_DFL || disposition(SIGINT) != SIG_DFL) return 11;
    return 0;
  };
  EXPECT_EXIT(_exit(body()), ::testing::ExitedWithCode(0), "");
}

// After a stop by Ctrl-C the process dies of SIGINT at its end (a shell's
// loop stops only then); any other code is returned as it is.
TEST(StopSignals, AProcessStoppedByCtrlCEndsBySigint) {
  threadsafe_death_tests();
  const auto stopped = [] {
    std::signal(SIGINT, SIG_DFL);
    if (!freopen("/dev/null", "w", stderr)) return 9;
    catch_stop_signals();
    if (disposition(SIGINT) == SIG_DFL) return 8;  // caught: the raise below is the handler's
    if (exit_code_or_die_of_sigint(130) != 130) return 10;  // none caught yet: returned
    raise(SIGINT);
    if (exit_code_or_die_of_sigint(2) != 2) return 11;  // not a stop: returned
    exit_code_or_die_of_sigint(stopped_exit_code());
    return 12;
  };
  EXPECT_EXIT(_exit(stopped()), ::testing::KilledBySignal(SIGINT), "");
}

}  // namespace
}  // namespace forge
