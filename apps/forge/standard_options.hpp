// The standard configuration sections shared by the forge commands, registered
// on an OptionSet with their keys, defaults (the structs' member initializers),
// allowed ranges and help:
//
//   [model]   ModelConfig    (vocab comes from the tokenizer, not from config)
//   [optim]   OptimConfig
//   [sample]  SamplingParams (stop_tokens come from the tokenizer / task)
//   [run]     RunConfig: output folder, seed, threads, backend, logging cadence
//
// configs/default.ini and docs/configuration.md list the same keys.
#pragma once
#include <cstdint>
#include <string>

#include "core/config.hpp"
#include "model/model_config.hpp"
#include "model/optimizer.hpp"
#include "model/sampling.hpp"

namespace forge {

struct RunConfig {
  std::string dir = "runs/latest";  // output folder of the run
  uint64_t seed = 1234;             // root of every random stream of the run
  int threads = 0;                  // OpenMP threads per rank; 0 = all cores
  std::string backend = "cpu";      // cpu | cuda (make_backend)
  std::string precision = "fp32";   // fp32 | bf16 (bf16: cuda only; parse_precision)
  int log_every = 10;               // steps between progress lines
  int checkpoint_every = 0;         // steps between checkpoints; 0 = only at the end
  int keep_checkpoints = 3;         // newest checkpoints kept; 0 = all
  double flush_seconds = 10;        // seconds between flushes of RUN_DIR/rollouts.h5
};

struct StandardConfig {
  ModelConfig model;
  OptimConfig optim;
  SamplingParams sample;
  RunConfig run;
};

void add_model_options(OptionSet& opts, ModelConfig& model);
void add_optim_options(OptionSet& opts, OptimConfig& optim);
void add_sampling_options(OptionSet& opts, SamplingParams& sample);
void add_run_options(OptionSet& opts, RunConfig& run);
// All four sections, in the order model, optim, sample, run.
void add_standard_options(OptionSet& opts, StandardConfig& config);

}  // namespace forge
