// The active clock (core/timer.hpp): a stop of the process is left out of
// every Stopwatch whichever of the SIGCONT handler, the ticker's next beat
// and a reader runs first on resuming; a long gap no SIGCONT confirms (the
// ticker starved) counts again after the confirmation window.
// A stop is simulated by a gap of 2.3 s between beats (past the 2 s pause
// threshold of a 10 ms ticker) and raise(SIGCONT), whose handler runs in the
// calling thread before raise returns. Each case runs in a child process:
// the clock is process-wide state.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "core/timer.hpp"

namespace forge {
namespace {

constexpr double kPeriod = 0.01;  // pause threshold 2 s, confirmation window 1 s
constexpr double kGap = 2.3;      // the simulated stop
constexpr double kSlack = 0.25;   // scheduling noise allowed on a shared machine

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Beats for `s` seconds, as a live ticker.
void beat_for(double s) {
  const Stopwatch sw;
  while (sw.seconds() < s) {
    tick(kPeriod);
    sleep_s(kPeriod);
  }
}

// Runs `scenario` in a child; it returns an empty string or what failed.
void in_child(const std::function<std::string()>& scenario) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    catch_sigcont();
    const std::string failed = scenario();
    if (!failed.empty()) std::fprintf(stderr, "%s\n", failed.c_str());
    std::fflush(nullptr);
    _exit(failed.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

std::string expect_near(const char* what, double value, double want) {
  if (value >= want - kSlack && value <= want + kSlack) return "";
  char b[160];
  std::snprintf(b, sizeof b, "%s: %.3f s, expected %.3f +- %.2f s", what, value, want, kSlack);
  return b;
}

TEST(ActiveClock, HandlerFirstLeavesTheStopOut) {
  in_child([] {
    tick(kPeriod);
    const Stopwatch sw;
    const double before = suspended_seconds();
    sleep_s(kGap);  // stopped: no beats
    raise(SIGCONT);
    std::string f = expect_near("suspended", suspended_seconds() - before, kGap - kPeriod);
    if (f.empty()) f = expect_near("active time across the stop", sw.seconds(), 0);
    beat_for(0.5);
    if (f.empty()) f = expect_near("active time after 0.5 s more", sw.seconds(), 0.5);
    return f;
  });
}

TEST(ActiveClock, TickerFirstLeavesTheStopOut) {
  in_child([] {
    tick(kPeriod);
    const Stopwatch sw;
    const double before = suspended_seconds();
    sleep_s(kGap);
    tick(kPeriod);  // the ticker's beat runs before the handler
    std::string f = expect_near("active time before the handler", sw.seconds(), 0);
    raise(SIGCONT);
    if (f.empty()) f = expect_near("suspended", suspended_seconds() - before, kGap - kPeriod);
    beat_for(1.5);  // past the confirmation window: the stop stays out
    if (f.empty()) f = expect_near("active time after 1.5 s more", sw.seconds(), 1.5);
    return f;
  });
}

TEST(ActiveClock, ReaderFirstLeavesTheStopOut) {
  in_child([] {
    tick(kPeriod);
    const Stopwatch sw;
    const double before = suspended_seconds();
    sleep_s(kGap);
    std::string f = expect_near("active time read before the handler", sw.seconds(), 0);
    raise(SIGCONT);
    if (f.empty()) f = expect_near("suspended", suspended_seconds() - before, kGap - kPeriod);
    if (f.empty()) f = expect_near("active time after the handler", sw.seconds(), 0);
    beat_for(1.5);
    if (f.empty()) f = expect_near("active time after 1.5 s more", sw.seconds(), 1.5);
    return f;
  });
}

TEST(ActiveClock, UnconfirmedGapsCountAgain) {
  in_child([] {
    tick(kPeriod);
    const Stopwatch sw;
    const double before = suspended_seconds();
    sleep_s(kGap);  // the ticker starved, no SIGCONT
    std::string f = expect_near("active time first read after the gap", sw.seconds(), 0);
    sleep_s(1.2);   // past the confirmation window
    if (f.empty()) f = expect_near("active time once unconfirmed", sw.seconds(), kGap + 1.2);
    tick(kPeriod);  // the late beat does not record the gap again
    if (f.empty()) f = expect_near("active time after the late beat", sw.seconds(), kGap + 1.2);
    // A beat that comes late with no reader about is recorded, and counts
    // again after the window without a SIGCONT.
    sleep_s(kGap);
    tick(kPeriod);
    if (f.empty()) f = expect_near("active time after an unread gap", sw.seconds(), kGap + 1.2);
    beat_for(1.2);
    if (f.empty()) f = expect_near("active time once that is unconfirmed", sw.seconds(), 2 * kGap + 2.4);
    if (f.empty()) f = expect_near("suspended", suspended_seconds() - before, 0);
    return f;
  });
}

}  // namespace
}  // namespace forge
