#include "mpi_roles/trajectory_codec.hpp"

#include "mpi_roles/wire_codec.hpp"

namespace forge {
namespace {

constexpr uint32_t kMagic = 0x52544746;  // "FGTR"
constexpr uint32_t kMaxTokens = 1u << 26;
constexpr uint32_t kMaxItems = 1u << 20;
// Bytes of an episode with empty strings and lists: the fixed-size fields.
constexpr size_t kMinEpisodeBytes = 8 + 4 + 8 + 4 + 4 + 4 + 4 + 3 * 4 + 2 + 3 * 4 + 4 + 4 + 3 * 4;

void check_tokens(const WireReader& r, const std::vector<int32_t>& tokens, int32_t vocab) {
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab) r.fail("token id " + std::to_string(t) + " outside [0, " + std::to_string(vocab) + ")");
}

}  // namespace

std::vector<uint8_t> encode_trajectories(const std::vector<Trajectory>& episodes) {
  WireWriter w;
  w.put(kMagic);
  w.put(kTrajectoryFormatVersion);
  w.put(static_cast<uint32_t>(episodes.size()));
  for (const Trajectory& t : episodes) {
    w.put(t.episode_id);
    w.put_str(t.env);
    w.put(t.task_id);
    w.put(t.group);
    w.put_str(t.template_family);
    w.put(static_cast<uint32_t>(t.calls.size()));
    for (const LlmCall& c : t.calls) {
      w.put_vec(c.context);
      w.put_vec(c.generated);
      w.put_vec(c.logprobs);
      w.put_vec(c.versions);
    }
    w.put(static_cast<uint32_t>(t.signals.size()));
    for (const ProcessSignal& s : t.signals) {
      w.put(s.turn);
      w.put_str(s.kind);
      w.put(s.value);
    }
    w.put(t.reward.outcome);
    w.put(t.reward.process);
    w.put(t.reward.efficiency);
    w.put(static_cast<uint8_t>(t.success));
    w.put(static_cast<uint8_t>(t.abandoned));
    w.put(t.turns);
    w.put(t.tool_errors);
    w.put(t.recoveries);
    w.put_str(t.final_answer);
    w.put_str(t.end_reason);
    w.put(t.needed_turns);
    w.put(t.needed_tokens);
    w.put(t.context_compactions);
  }
  return w.take();
}

std::vector<Trajectory> decode_trajectories(const uint8_t* data, size_t size, int32_t vocab,
                                            const std::string& what) {
  WireReader r(data, size, what);
  if (r.get<uint32_t>() != kMagic) r.fail("not a trajectory payload (bad magic)");
  const uint32_t version = r.get<uint32_t>();
  if (version != kTrajectoryFormatVersion)
    r.fail("format version " + std::to_string(version) + " (this build reads " +
           std::to_string(kTrajectoryFormatVersion) + ")");
  const uint32_t n = r.get<uint32_t>();
  if (n > kMaxItems) r.fail("an episode count of " + std::to_string(n));
  r.expect_room(n, kMinEpisodeBytes, "episodes");
  std::vector<Trajectory> out(n);
  for (Trajectory& t : out) {
    t.episode_id = r.get<uint64_t>();
    t.env = r.get_str();
    t.task_id = r.get<uint64_t>();
    t.group = r.get<int32_t>();
    t.template_family = r.get_str();
    const uint32_t calls = r.get<uint32_t>();
    if (calls > kMaxItems) r.fail("a call count of " + std::to_string(calls));
    r.expect_room(calls, 4 * sizeof(uint32_t), "calls");
    t.calls.resize(calls);
    for (LlmCall& c : t.calls) {
      c.context = r.get_vec<int32_t>(kMaxTokens);
      c.generated = r.get_vec<int32_t>(kMaxTokens);
      c.logprobs = r.get_vec<float>(kMaxTokens);
      c.versions = r.get_vec<int32_t>(kMaxTokens);
      if (c.logprobs.size() != c.generated.size() || c.versions.size() != c.generated.size())
        r.fail("a call with " + std::to_string(c.generated.size()) + " generated tokens but " +
               std::to_string(c.logprobs.size()) + " logprobs and " + std::to_string(c.versions.size()) +
               " versions");
      check_tokens(r, c.context, vocab);
      check_tokens(r, c.generated, vocab);
    }
    const uint32_t signals = r.get<uint32_t>();
    if (signals > kMaxItems) r.fail("a signal count of " + std::to_string(signals));
    r.expect_room(signals, 2 * sizeof(int32_t) + sizeof(float), "signals");
    t.signals.resize(signals);
    for (ProcessSignal& s : t.signals) {
      s.turn = r.get<int32_t>();
      s.kind = r.get_str();
      s.value = r.get<float>();
    }
    t.reward.outcome = r.get<float>();
    t.reward.process = r.get<float>();
    t.reward.efficiency = r.get<float>();
    t.success = r.get<uint8_t>() != 0;
    t.abandoned = r.get<uint8_t>() != 0;
    t.turns = r.get<int32_t>();
    t.tool_errors = r.get<int32_t>();
    t.recoveries = r.get<int32_t>();
    t.final_answer = r.get_str();
    t.end_reason = r.get_str();
    t.needed_turns = r.get<int32_t>();
    t.needed_tokens = r.get<int32_t>();
    t.context_compactions = r.get<int32_t>();
  }
  r.expect_end();
  return out;
}

}  // namespace forge
