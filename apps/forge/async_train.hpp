// `forge train` on MPI ranks: the asynchronous run (see async_train.cpp).
#pragma once
#include <csignal>

#include "core/config.hpp"
#include "forge_config.hpp"

namespace forge {

// Called on every rank after MPI_Init when the world has more than one rank.
// `terminate` is the stop flag forge train caught (core/stop_signals.hpp).
// Returns the process exit code (0, or 143 after a stop signal); errors abort
// the job with a message naming the rank.
int run_async_train(ForgeConfig& all, const OptionSet& opts, bool resume, volatile std::sig_atomic_t* terminate);

}  // namespace forge
