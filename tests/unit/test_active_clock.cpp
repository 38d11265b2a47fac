// The active clock (core/timer.hpp). A stop is simulated by a gap with
// neither beats nor reads (a stopped process does neither): it counts as
// the overdue threshold P = 1 s at most (ticker 10 ms), whichever of the
// ticker and a reader looks first after it. A ticker starved while a reader
// looks delays the reader by the window X = 1 s, no more. Readings never go
// back, with a ticker and readers on threads and beats that come late.
// Each case runs in a child process: the clock is process-wide state.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/timer.hpp"

namespace forge {
namespace {

constexpr double kPeriod = 0.01;  // P = X = 1 s
constexpr double kGap = 2.5;      // the simulated stop
constexpr double kSlack = 0.25;   // scheduling noise allowed on a shared machine

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Beats for `s` steady seconds, as a live ticker.
void beat_for(double s) {
  const double end = steady_s() + s;
  while (steady_s() < end) {
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

TEST(ActiveClock, WithoutATickerItIsTheSteadyClock) {
  in_child([] {
    const Stopwatch sw;
    sleep_s(1.5);
    return expect_near("active time", sw.seconds(), 1.5);
  });
}

TEST(ActiveClock, AStopCountsAsTheOverdueThresholdAtMostWhoeverLooksFirst) {
  for (const bool ticker_first : {false, true})
    in_child([ticker_first] {
      tick(kPeriod);
      const Stopwatch sw;
      sleep_s(kGap);  // stopped: no beats, no reads
      if (ticker_first) tick(kPeriod);
      std::string f = expect_near(ticker_first ? "read after the ticker's beat" : "read first", sw.seconds(), 1.0);
      if (!ticker_first) tick(kPeriod);
      if (f.empty()) f = expect_near("after the beat", sw.seconds(), 1.0);
      if (f.empty()) f = expect_near("left out", left_out_seconds(), kGap - 1.0);
      beat_for(0.5);
      if (f.empty()) f = expect_near("0.5 s later", sw.seconds(), 1.5);
      return f;
    });
}

TEST(ActiveClock, AStarvedTickerDelaysAReaderByTheWindowAtMost) {
  in_child([] {
    tick(kPeriod);
    const Stopwatch sw;
    double last = 0, first_past_p = -1;
    const double start = steady_s();
    std::string f;
    while (steady_s() - start < 3.5 && f.empty()) {  // no beats: the ticker starved; the reader looks
      const double s = sw.seconds();
      if (s < last) f = "a reading went back";
      if (first_past_p < 0 && s > 1.0 + 1e-3) first_past_p = steady_s() - start;
      last = s;
      sleep_s(0.005);
    }
    // frozen at P from t = P to t = P + X, then counting again
    if (f.empty()) f = expect_near("when the frozen clock went on", first_past_p, 2.0);
    if (f.empty()) f = expect_near("after 3.5 s", sw.seconds(), 2.5);
    tick(kPeriod);  // the late beat publishes what the reader read
    if (f.empty()) f = expect_near("after the late beat", sw.seconds(), 2.5);
    beat_for(0.5);
    if (f.empty()) f = expect_near("0.5 s later", sw.seconds(), 3.0);
    return f;
  });
}

TEST(ActiveClock, ReadingsNeverGoBackAcrossLateBeats) {
  in_child([] {
    std::atomic<bool> done{false};
    std::thread ticker([&] {
      for (int i = 0; !done; ++i) {
        tick(kPeriod);
        sleep_s(i % 40 == 39 ? 1.3 : kPeriod);  // a late beat now and then
      }
    });
    std::vector<std::string> fails(2);
    std::vector<std::thread> readers;
    for (int r = 0; r < 2; ++r)
      readers.emplace_back([&, r] {
        int64_t last = active_ns();
        for (int i = 0; !done && fails[r].empty(); ++i) {
          if (i % 1024 == 0) std::this_thread::yield();
          const int64_t now = active_ns();
          if (now < last) fails[r] = "reader " + std::to_string(r) + ": " + std::to_string(last - now) + " ns back";
          last = now;
        }
      });
    sleep_s(3.5);  // two late beats
    done = true;
    for (auto& t : readers) t.join();
    ticker.join();
    return fails[0].empty() ? fails[1] : fails[0];
  });
}

}  // namespace
}  // namespace forge
