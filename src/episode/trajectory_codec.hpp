// Episodes as bytes: the data pool's payload (the episodes of one slot, one
// task's advantage group), a learner batch broadcast to the other learners,
// and the groups a checkpoint keeps.
//
//   magic "FGTR", uint32 format version, uint32 episode count, then per
//   episode every field in the order of trajectory_fields.hpp
//   (core/wire_codec.hpp; bools as one byte); per LLM call: context,
//   generated, logprobs, versions; per process signal: turn, kind, value.
//
// Decoding checks the magic, the version, every length, that each call has
// one logprob and one version per generated token, that every token is in
// [0, vocab), every logprob finite and every version >= -1: a malformed
// payload is an InputError naming the payload, the episode and the field,
// never a crash in the learner. There is no checksum: damage that keeps
// every value in range decodes (MPI and HDF5's own checksums guard those
// paths).
//
// The layout is pinned by TrajectoryCodec.TheLayoutIsPinnedToItsVersion:
// a field added to trajectory_fields.hpp must bump the version. (Version 1
// payloads of builds before 2026-11-25, which lacked safety, safety_events
// and test_runs, were not told apart; they fail as truncated.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "episode/trajectory.hpp"

namespace forge {

inline constexpr uint32_t kTrajectoryFormatVersion = 1;

// Encoding refuses (Error) what decoding would: more than 2^20 episodes,
// calls or signals, a string over 1 MiB, a token list over 2^26.
std::vector<uint8_t> encode_trajectories(const std::vector<Trajectory>& episodes);

// A group's payload for a data-pool slot of `slot_bytes`: encoded whole, or,
// when it does not fit or an episode is beyond the codec's limits (a final
// answer over 1 MiB), with its episodes recorded as abandoned without
// their calls (one oversized group must not end a run hours in: the learner
// leaves abandoned episodes out; rollouts.h5 marks them abandoned, and the
// warning names why). *dropped is the warning to log when they were dropped,
// else left empty. InputError when even the episodes without their calls do
// not fit (thousands of episodes in a group).
std::vector<uint8_t> encode_group_for_slot(std::vector<Trajectory>& episodes, size_t slot_bytes,
                                           std::string* dropped);

// `what` names the payload in errors (e.g. "slot 17 from environment rank 3").
std::vector<Trajectory> decode_trajectories(const uint8_t* data, size_t size, int32_t vocab,
                                            const std::string& what);

}  // namespace forge
