// The learners hold the same weights: each starts from the same ones and
// applies the same summed gradient (learner_gradient_sum.hpp), so their
// parameters stay bitwise equal. Nothing else would notice if they did not
// (only the lead publishes and checkpoints): a non-deterministic kernel, or
// learners on nodes whose CPU kernels round differently (the x86-64-v3 and
// -v4 builds), would make them drift apart silently. At each checkpoint the
// learners compare a 64-bit hash of their parameters' bytes (FNV-1a over
// 64-bit words), gathered over the learners' communicator. Before the first
// step they compare the step they start at.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "model/policy_model.hpp"

namespace forge {

// FNV-1a over the 64-bit words of `bytes` (a trailing partial word padded
// with zeros).
uint64_t parameter_hash(const void* data, size_t bytes);
// Of the model's parameters (downloaded from a device backend).
uint64_t parameter_hash(PolicyModel& model);

// Collective over learners (one learner: nothing): each gives the hash of
// its parameters. Error on the lead naming the learners (by world rank)
// whose hash differs from its own after `steps_done`.
void check_learners_agree(MPI_Comm learners, uint64_t hash, int steps_done);

// Collective over learners: each gives the step it starts at (a resume's
// checkpoint, found in its own view of run.dir). Error on the lead naming the
// learners (by world rank) that start elsewhere: they would run a different
// number of steps and meet the lead's broadcasts out of step, a hang.
void check_learners_start_together(MPI_Comm learners, int64_t start_step);

}  // namespace forge
