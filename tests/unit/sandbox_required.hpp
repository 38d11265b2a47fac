// REQUIRE_SANDBOX(): for tests that run programs in the sandbox. Skips with
// the reason where this machine refuses what bwrap needs (user namespaces);
// fails where bwrap is missing, since tools/setup.sh installs it.
#pragma once
#include <string>

#include <gtest/gtest.h>

#include "sandbox/sandbox.hpp"

#define REQUIRE_SANDBOX()                                                                  \
  do {                                                                                     \
    const std::string& why = ::forge::sandbox_unavailable_reason();                        \
    ASSERT_EQ(why.find("could not execute bwrap"), std::string::npos) << why;              \
    if (!why.empty()) GTEST_SKIP() << "sandboxes cannot start on this machine: " << why;   \
  } while (0)
