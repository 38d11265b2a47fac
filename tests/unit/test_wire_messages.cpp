// The messages between ranks: trajectory payloads of the data pool and the
// generation RPC round-trip exactly, and every truncated or corrupted byte
// string is an InputError naming the message, never a crash. Also the role
// layout of a world.
#include <gtest/gtest.h>

#include <limits>

#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/rng.hpp"
#include "episode/trajectory_codec.hpp"
#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/role_layout.hpp"

namespace forge {
namespace {

// TheLayoutIsPinnedToItsVersion's figures for sample_trajectory(1).
constexpr size_t kPinnedBytes = 546;
constexpr uint64_t kPinnedDigest = 1983333923093946195ull;  // FNV-1a 64 of the bytes (little-endian host)

// TheLayoutIsPinnedToItsVersion digests sample_trajectory(1): a change here
// changes its figures (update them; that is no layout change).
Trajectory sample_trajectory(uint64_t id) {
  Trajectory t;
  t.episode_id = id;
  t.env = "calc";
  t.task_id = 77 + id;
  t.group = 3;
  t.template_family = "tools.short/system.terse";
  for (int c = 0; c < 3; ++c) {
    LlmCall call;
    for (int i = 0; i < 10 + c; ++i) call.context.push_back((i * 7 + c) % 272);
    for (int i = 0; i < 4 + c; ++i) {
      call.generated.push_back((i * 13 + 5) % 272);
      call.logprobs.push_back(-0.25f * static_cast<float>(i));
      call.versions.push_back(c);
    }
    t.calls.push_back(call);
  }
  t.signals = {{0, "valid_call", 0.1f}, {2, "tool_error", -0.2f}};
  t.reward = {1.0f, -0.1f, -0.05f, -0.5f};
  t.success = true;
  t.turns = 3;
  t.tool_errors = 1;
  t.recoveries = 1;
  t.final_answer = "42";
  t.end_reason = "answer";
  t.needed_turns = 2;
  t.needed_tokens = 9;
  t.context_compactions = 1;
  t.safety_events = 2;
  t.test_runs = 5;
  return t;
}

void expect_equal(const Trajectory& a, const Trajectory& b) {
  EXPECT_EQ(a.episode_id, b.episode_id);
  EXPECT_EQ(a.env, b.env);
  EXPECT_EQ(a.task_id, b.task_id);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.template_family, b.template_family);
  ASSERT_EQ(a.calls.size(), b.calls.size());
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].context, b.calls[i].context);
    EXPECT_EQ(a.calls[i].generated, b.calls[i].generated);
    EXPECT_EQ(a.calls[i].logprobs, b.calls[i].logprobs);
    EXPECT_EQ(a.calls[i].versions, b.calls[i].versions);
  }
  ASSERT_EQ(a.signals.size(), b.signals.size());
  for (size_t i = 0; i < a.signals.size(); ++i) {
    EXPECT_EQ(a.signals[i].turn, b.signals[i].turn);
    EXPECT_EQ(a.signals[i].kind, b.signals[i].kind);
    EXPECT_EQ(a.signals[i].value, b.signals[i].value);
  }
  EXPECT_EQ(a.reward.outcome, b.reward.outcome);
  EXPECT_EQ(a.reward.process, b.reward.process);
  EXPECT_EQ(a.reward.efficiency, b.reward.efficiency);
  EXPECT_EQ(a.reward.safety, b.reward.safety);
  EXPECT_EQ(a.success, b.success);
  EXPECT_EQ(a.abandoned, b.abandoned);
  EXPECT_EQ(a.turns, b.turns);
  EXPECT_EQ(a.tool_errors, b.tool_errors);
  EXPECT_EQ(a.recoveries, b.recoveries);
  EXPECT_EQ(a.final_answer, b.final_answer);
  EXPECT_EQ(a.end_reason, b.end_reason);
  EXPECT_EQ(a.needed_turns, b.needed_turns);
  EXPECT_EQ(a.needed_tokens, b.needed_tokens);
  EXPECT_EQ(a.context_compactions, b.context_compactions);
  EXPECT_EQ(a.safety_events, b.safety_events);
  EXPECT_EQ(a.test_runs, b.test_runs);
}

TEST(TrajectoryCodec, RoundTripsEveryField) {
  const std::vector<Trajectory> in = {sample_trajectory(1), sample_trajectory(2), Trajectory{}};
  const std::vector<uint8_t> bytes = encode_trajectories(in);
  const std::vector<Trajectory> out = decode_trajectories(bytes.data(), bytes.size(), 272, "test");
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) expect_equal(in[i], out[i]);
}

TEST(TrajectoryCodec, EveryTruncationIsAnInputError) {
  const std::vector<uint8_t> bytes = encode_trajectories({sample_trajectory(5)});
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      decode_trajectories(bytes.data(), n, 272, "slot 9 from environment rank 2");
      FAIL() << "a payload cut to " << n << " bytes decoded";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("slot 9 from environment rank 2"), std::string::npos);
    }
  }
}

TEST(TrajectoryCodec, CorruptedBytesNeverCrash) {
  const std::vector<uint8_t> good = encode_trajectories({sample_trajectory(5), sample_trajectory(6)});
  Rng rng(3);
  int errors = 0, decoded = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bad = good;
    for (int k = 0; k < 3; ++k) bad[rng.below(bad.size())] = static_cast<uint8_t>(rng.below(256));
    try {
      // What decodes is what those bytes say, whole: encoded again, the same
      // bytes (no field read past, skipped or read twice).
      const auto back = decode_trajectories(bad.data(), bad.size(), 272, "test");
      ++decoded;
      const auto again = encode_trajectories(back);
      size_t at = 0;
      while (at < again.size() && at < bad.size() && again[at] == bad[at]) ++at;
      EXPECT_EQ(again, bad) << "trial " << trial << " first difference at byte " << at << " of " << bad.size()
                            << ": " << (at < bad.size() ? int(bad[at]) : -1) << " re-encoded as "
                            << (at < again.size() ? int(again[at]) : -1);
    } catch (const InputError&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);  // many flips hit lengths, magic or token ids
  EXPECT_GT(decoded, 0);  // and some only values
}

TEST(TrajectoryCodec, RejectsForeignVersionAndOutOfVocabularyTokens) {
  std::vector<uint8_t> bytes = encode_trajectories({sample_trajectory(1)});
  std::vector<uint8_t> v2 = bytes;
  v2[4] = 9;  // format version
  EXPECT_THROW(decode_trajectories(v2.data(), v2.size(), 272, "t"), InputError);
  EXPECT_THROW(decode_trajectories(bytes.data(), bytes.size(), 50, "t"), InputError);  // ids up to 83
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(decode_trajectories(longer.data(), longer.size(), 272, "t"), InputError);
}

// The byte layout of a fixed episode, as a size and an FNV-1a digest: a
// field added to trajectory_fields.hpp (or a call's or signal's layout
// changed) fails here, and must bump kTrajectoryFormatVersion, then update
// these figures. (safety, safety_events and test_runs were added under
// version 1: payloads of the builds before read as truncated.)
TEST(TrajectoryCodec, TheLayoutIsPinnedToItsVersion) {
  const std::vector<uint8_t> bytes = encode_trajectories({sample_trajectory(1)});
  const uint64_t digest = fnv1a64(bytes);
  EXPECT_EQ(kTrajectoryFormatVersion, 1u);
  EXPECT_EQ(bytes.size(), kPinnedBytes) << "the layout changed: bump kTrajectoryFormatVersion";
  EXPECT_EQ(digest, kPinnedDigest) << "the layout changed: bump kTrajectoryFormatVersion";
}

// What an engine never records is refused, naming the episode and the field:
// a logprob that is not finite, a version below -1 (none known). And any
// decoding error names where it stopped.
TEST(TrajectoryCodec, ValuesNoEngineRecordsAreRefusedWithTheirField) {
  for (const int what : {0, 1, 2}) {
    std::vector<Trajectory> in = {sample_trajectory(1), sample_trajectory(2)};
    LlmCall& c = in[1].calls[1];
    if (what == 0) c.logprobs[2] = std::numeric_limits<float>::quiet_NaN();
    if (what == 1) c.logprobs[0] = -std::numeric_limits<float>::infinity();
    if (what == 2) c.versions[1] = -2;
    const std::vector<uint8_t> bytes = encode_trajectories(in);
    try {
      decode_trajectories(bytes.data(), bytes.size(), 272, "slot 4");
      FAIL() << "case " << what << " decoded";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("slot 4"), std::string::npos) << m;
      EXPECT_NE(m.find("episode 1 of 2, field calls"), std::string::npos) << m;
      EXPECT_NE(m.find(what == 2 ? "a policy version of -2" : "not finite"), std::string::npos) << m;
    }
  }
  const std::vector<uint8_t> bytes = encode_trajectories({sample_trajectory(1)});
  try {  // cut inside the last string field, end_reason's "answer"
    decode_trajectories(bytes.data(), bytes.size() - 5 * sizeof(int32_t) - 2, 272, "t");
    FAIL() << "a cut payload decoded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("field end_reason"), std::string::npos) << e.what();
  }
}

// A group that does not fit its slot even without its calls is an error
// naming the setting (the pool refused the payload and ended the run with a
// message about its own bytes).
TEST(TrajectoryCodec, AGroupTooLargeForItsSlotWithoutCallsNamesTheSetting) {
  std::vector<Trajectory> group = {sample_trajectory(1)};
  std::string dropped;
  try {
    encode_group_for_slot(group, 50, &dropped);
    FAIL() << "a payload larger than 50 bytes was returned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pool.slot_mib"), std::string::npos) << e.what();
  }
}

// A call whose logprobs or versions are not one per generated token is a
// producer's bug: the encoder names it (found by review: it was encoded and
// the learner refused the payload).
TEST(TrajectoryCodec, TheEncoderRefusesACallWithoutOneLogprobPerToken) {
  for (const bool versions : {false, true}) {
    std::vector<Trajectory> group = {sample_trajectory(1), sample_trajectory(2)};
    ASSERT_FALSE(group[1].calls.empty());
    LlmCall& c = group[1].calls.back();
    if (versions) c.versions.push_back(0);
    else c.logprobs.pop_back();
    try {
      encode_trajectories(group);
      FAIL() << "encoded a call with unequal counts";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("episode 2 call " + std::to_string(group[1].calls.size() - 1)),
                std::string::npos)
          << e.what();
    }
  }
}

// The encoder refuses what the decoder would (a string over 1 MiB): a data
// pool slot gets the group as abandoned, named, instead of a payload the
// learner reads as malformed.
TEST(TrajectoryCodec, AnEpisodeBeyondTheDecodersLimitsIsAbandonedNotSent) {
  std::vector<Trajectory> group = {sample_trajectory(1), sample_trajectory(2)};
  group[1].final_answer.assign((1u << 20) + 1, 'x');
  EXPECT_THROW(encode_trajectories(group), Error);
  std::string dropped;
  const std::vector<uint8_t> payload = encode_group_for_slot(group, 64u << 20, &dropped);
  EXPECT_NE(dropped.find("final_answer of 1048577 bytes"), std::string::npos) << dropped;
  EXPECT_NE(dropped.find("agent.max_new_tokens"), std::string::npos) << dropped;
  const std::vector<Trajectory> out = decode_trajectories(payload.data(), payload.size(), 272, "t");
  ASSERT_EQ(out.size(), 2u);
  for (const Trajectory& t : out) {
    EXPECT_TRUE(t.abandoned);
    EXPECT_TRUE(t.calls.empty());
    EXPECT_NE(t.end_reason.find("episode 2 has a final_answer"), std::string::npos) << t.end_reason;
  }
  // At the limit it is sent as it is.
  group = {sample_trajectory(1)};
  group[0].final_answer.assign(1u << 20, 'x');
  dropped.clear();
  const std::vector<uint8_t> whole = encode_group_for_slot(group, 64u << 20, &dropped);
  EXPECT_TRUE(dropped.empty()) << dropped;
  EXPECT_EQ(decode_trajectories(whole.data(), whole.size(), 272, "t")[0].final_answer.size(), 1u << 20);
}

TEST(GenerationMessages, RequestAndResultRoundTrip) {
  GenerationRequest q;
  q.id = 12345;
  q.prompt = {1, 2, 3, 200};
  q.sampling.temperature = 0.7f;
  q.sampling.top_p = 0.9f;
  q.sampling.top_k = 5;
  q.sampling.max_new_tokens = 33;
  q.sampling.stop_tokens = {7, 8};
  q.sampling.seed = 99;
  q.session = "episode-4";
  q.min_version = 6;
  const GenerationRequest q2 = decode_request(encode_request(q), "req");
  EXPECT_EQ(q2.id, q.id);
  EXPECT_EQ(q2.prompt, q.prompt);
  EXPECT_EQ(q2.sampling.temperature, q.sampling.temperature);
  EXPECT_EQ(q2.sampling.top_p, q.sampling.top_p);
  EXPECT_EQ(q2.sampling.top_k, q.sampling.top_k);
  EXPECT_EQ(q2.sampling.max_new_tokens, q.sampling.max_new_tokens);
  EXPECT_EQ(q2.sampling.stop_tokens, q.sampling.stop_tokens);
  EXPECT_EQ(q2.sampling.seed, q.sampling.seed);
  EXPECT_EQ(q2.session, q.session);
  EXPECT_EQ(q2.min_version, 6);
  q.min_version = -1;  // versions are >= 0
  EXPECT_THROW(decode_request(encode_request(q), "req"), InputError);

  GenerationResult r;
  r.id = 8;
  r.tokens = {4, 5};
  r.logprobs = {-0.5f, -1.5f};
  r.versions = {3, 4};
  r.finish = FinishReason::kLength;
  r.prefill_computed = 10;
  r.prefill_reused = 20;
  r.prefill_shared = 30;
  const GenerationResult r2 = decode_result(encode_result(r), "res");
  EXPECT_EQ(r2.id, r.id);
  EXPECT_EQ(r2.tokens, r.tokens);
  EXPECT_EQ(r2.logprobs, r.logprobs);
  EXPECT_EQ(r2.versions, r.versions);
  EXPECT_EQ(r2.finish, r.finish);
  EXPECT_EQ(r2.prefill_computed, 10);
  EXPECT_EQ(r2.prefill_reused, 20);
  EXPECT_EQ(r2.prefill_shared, 30);

  std::vector<uint8_t> cut = encode_result(r);
  cut.pop_back();
  EXPECT_THROW(decode_result(cut, "res"), InputError);
  std::vector<uint8_t> bad_finish = encode_result(r);
  bad_finish[8 + 4 + 8 + 4 + 8 + 4 + 8] = 77;  // finish reason
  EXPECT_THROW(decode_result(bad_finish, "res"), InputError);
}

TEST(RoleLayout, BlocksOfLearnersRolloutsAndEnvironments) {
  const RoleLayout l(7, {2, 2});
  EXPECT_EQ(l.role_of(0), Role::kLearner);
  EXPECT_EQ(l.role_of(1), Role::kLearner);
  EXPECT_EQ(l.role_of(2), Role::kRollout);
  EXPECT_EQ(l.role_of(3), Role::kRollout);
  EXPECT_EQ(l.role_of(4), Role::kEnvironment);
  EXPECT_EQ(l.role_of(6), Role::kEnvironment);
  EXPECT_EQ(l.count(Role::kEnvironment), 3);
  EXPECT_EQ(l.first(Role::kEnvironment), 4);
  EXPECT_EQ(l.index_in_role(5), 1);
  EXPECT_EQ(l.name(3), "rollout rank 3");
  EXPECT_EQ(l.name(5), "environment rank 5");
  // Under gateway.enabled the environment ranks are gateway ranks in messages.
  const RoleLayout g(7, {2, 2, true});
  EXPECT_EQ(g.name(5), "gateway rank 5");
  EXPECT_EQ(g.role_of(5), Role::kEnvironment);
  EXPECT_EQ(g.name(1), "learner rank 1");
}

TEST(RoleLayout, TooSmallAWorldNamesTheCounts) {
  try {
    RoleLayout(3, {2, 1});
    FAIL();
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mpi.learners = 2"), std::string::npos) << m;
    EXPECT_NE(m.find("-np 4"), std::string::npos) << m;
  }
  EXPECT_THROW(RoleLayout(4, {0, 1}), InputError);
  EXPECT_THROW(RoleLayout(4, {1, 0}), InputError);
}

}  // namespace
}  // namespace forge
