// The gateway without HTTP or MPI: chat messages <-> tokens, the episode
// record, and the service's episode life cycle with a fake generation loop.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "agent/agent_episode.hpp"
#include "agent/tool_call_format.hpp"
#include "env/env_mix.hpp"
#include "gateway/chat_messages.hpp"
#include "gateway/gateway_service.hpp"
#include "gateway/request_error.hpp"
#include "model/tokenizer.hpp"

namespace forge {
namespace {

using nlohmann::json;

Tokens cat(std::initializer_list<Tokens> parts) {
  Tokens out;
  for (const Tokens& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

int request_error_status(const std::function<void()>& f) {
  try {
    f();
  } catch (const RequestError& e) {
    return e.status();
  }
  return 0;
}

TEST(GatewayMessages, RendersLikeTheWhiteBoxScaffoldAndReusesReturnedTokens) {
  const Tokenizer tok;
  for (TemplateStyle ts : {TemplateStyle::kSpecial, TemplateStyle::kText, TemplateStyle::kToolAsUser}) {
    const ChatTemplate tmpl(ts);
    EpisodeTexts texts;
    texts.system_tokens = cat({tok.encode("Use: "), {kToolCallOpen}, tok.encode("calc 1+2"), {kToolCallClose}});
    texts.system = tokens_text(texts.system_tokens);
    texts.user_tokens = tok.encode("Compute 2*3.");
    texts.user = tokens_text(texts.user_tokens);
    // A tool call the policy generated, returned, and echoed back by the agent.
    const Tokens gen = cat({render_action(CallFormat::kParen, {"calc", "2*3"}), {kEndOfTurn}});
    std::string finish;
    const json reply = reply_message(gen, CallFormat::kParen, "call_7_0", false, &finish);
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_TRUE(reply.contains("tool_calls"));
    EXPECT_EQ(reply["tool_calls"][0]["function"]["name"], "calc");
    EXPECT_EQ(json::parse(reply["tool_calls"][0]["function"]["arguments"].get<std::string>())["input"], "2*3");
    texts.replies.push_back({reply, gen});
    const json messages = json::array({{{"role", "system"}, {"content", texts.system}},
                                       {{"role", "user"}, {"content", texts.user}},
                                       reply,
                                       {{"role", "tool"}, {"tool_call_id", "call_7_0"}, {"content", "6"}}});
    const Tokens got = render_chat(messages, ts, CallFormat::kParen, texts);
    // The white-box context: special tokens of the system text kept, the
    // generated tokens reused exactly.
    const Tokens want = cat({tmpl.opening(texts.system_tokens, texts.user_tokens), tmpl.assistant_start(), gen,
                             tmpl.assistant_end(gen), tmpl.tool_message(tok.encode("6")), tmpl.assistant_start()});
    EXPECT_EQ(got, want);
  }
}

TEST(GatewayMessages, AgentTextIsEncodedAndRendersAsActions) {
  const Tokenizer tok;
  EpisodeTexts texts;
  texts.user = "hi";
  texts.user_tokens = tok.encode("hi");
  // The system text differs from the one handed out: encoded as bytes.
  const json m = json::array({{{"role", "system"}, {"content", "<|eot|>"}},
                              {{"role", "user"}, {"content", "hi"}},
                              {{"role", "assistant"}, {"content", "42"}},
                              {{"role", "user"}, {"content", "sure?"}}});
  const ChatTemplate tmpl(TemplateStyle::kSpecial);
  const Tokens answer = render_action(CallFormat::kXml, {kAnswerTool, "42"});
  const Tokens want = cat({tmpl.opening(tok.encode("<|eot|>"), tok.encode("hi")), tmpl.assistant_start(), answer,
                           tmpl.assistant_end(answer), tmpl.user_message(tok.encode("sure?")),
                           tmpl.assistant_start()});
  EXPECT_EQ(render_chat(m, TemplateStyle::kSpecial, CallFormat::kXml, texts), want);
}

TEST(GatewayMessages, MalformedMessagesAre400) {
  EpisodeTexts texts;
  const auto status = [&](const json& m) {
    return request_error_status([&] { render_chat(m, TemplateStyle::kSpecial, CallFormat::kParen, texts); });
  };
  EXPECT_EQ(status(json::object()), 400);
  EXPECT_EQ(status(json::array()), 400);
  EXPECT_EQ(status(json::array({{{"role", "assistant"}, {"content", "x"}}})), 400);
  EXPECT_EQ(status(json::array({{{"content", "x"}}})), 400);
  EXPECT_EQ(status(json::array({{{"role", "user"}, {"content", 3}}})), 400);
  EXPECT_EQ(status(json::array({{{"role", "user"}, {"content", "x"}}, {{"role", "wizard"}, {"content", "x"}}})), 400);
  EXPECT_EQ(status(json::array({{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}, {"content", "y"}}})), 400);
  const json bad_args = {{"role", "assistant"},
                         {"tool_calls", json::array({{{"id", "c"}, {"function", {{"name", "calc"}, {"arguments", "{"}}}}})}};
  EXPECT_EQ(status(json::array({{{"role", "user"}, {"content", "x"}}, bad_args, {{"role", "user"}, {"content", "y"}}})), 400);
  EXPECT_EQ(status(json::array({{{"role", "user"}, {"content", "x"}}})), 0);
}

TEST(GatewayMessages, ValidUtf8ReplacesBadBytesOnly) {
  EXPECT_EQ(valid_utf8("abc \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), "abc \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(valid_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(valid_utf8("\xC3"), "\xEF\xBF\xBD");               // truncated
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80").substr(0, 3), "\xEF\xBF\xBD");  // surrogate
}

struct GatewayEpisodes : ::testing::Test {
  EnvConfig env;
  AgentConfig agent;
  GatewayConfig gw;
  SamplingParams sampling;

  std::unique_ptr<GatewayEpisode> episode(uint64_t id, uint64_t slot) {
    env.perturb = false;
    const EnvMix mix(env);
    const PerturbationSampler sampler(false, {});
    return std::make_unique<GatewayEpisode>(mix.make_for(slot + 11), slot + 11,
                                            episode_style(sampler, slot + 11, id, StyleMode::kTrain), agent, id, slot);
  }
};

GenerationResult result_for(const GenerationJob& job, Tokens tokens) {
  GenerationResult r;
  r.id = job.request.id;
  r.tokens = std::move(tokens);
  r.logprobs.assign(r.tokens.size(), -0.5f);
  r.versions.assign(r.tokens.size(), 3);
  return r;
}

TEST_F(GatewayEpisodes, EpisodeRecordsCallsBranchesAndRewards) {
  auto e = episode(4, 2);
  const json task = e->task_json();
  json messages = task["messages"];
  const Tokens p1 = e->render_chat(messages);
  GenerationJob job;
  const Tokens gen = cat({render_in_style(e->style(), {"calc", "1+1"}), {kEndOfTurn}});
  std::string finish;
  const json reply = e->record_chat(p1, result_for(job, gen), &finish);
  messages.push_back(reply);
  messages.push_back({{"role", "tool"}, {"content", "2"}});
  const Tokens p2 = e->render_chat(messages);
  ASSERT_GT(p2.size(), p1.size() + gen.size());
  EXPECT_TRUE(std::equal(p1.begin(), p1.end(), p2.begin()));
  EXPECT_TRUE(std::equal(gen.begin(), gen.end(), p2.begin() + p1.size()));
  e->record_chat(p2, result_for(job, gen), &finish);
  // The agent rewrites history: the episode branches (a signal, value 0).
  e->record_chat(p1, result_for(job, gen), &finish);
  const json out = e->answer("nonsense");
  EXPECT_EQ(out["outcome"], 0.0);
  EXPECT_EQ(request_error_status([&] { e->answer("again"); }), 409);
  e->post_reward({{"outcome", 1.0}, {"process", 0.25}});
  EXPECT_EQ(request_error_status([&] { e->post_reward({{"bonus", 1}}); }), 400);
  EXPECT_EQ(request_error_status([&] { e->post_reward({{"outcome", "x"}}); }), 400);
  const Trajectory t = e->finish(false, "closed");
  ASSERT_EQ(t.calls.size(), 3u);
  EXPECT_EQ(t.calls[1].context, p2);
  EXPECT_EQ(t.calls[0].generated, gen);
  EXPECT_EQ(t.calls[0].versions, std::vector<int32_t>(gen.size(), 3));
  int rewrites = 0;
  for (const auto& s : t.signals) rewrites += s.kind == "history_rewritten";
  EXPECT_EQ(rewrites, 1);
  EXPECT_FLOAT_EQ(t.reward.outcome, 1.0f);
  EXPECT_FLOAT_EQ(t.reward.process, 0.25f);
  EXPECT_TRUE(t.success);
  EXPECT_FALSE(t.abandoned);
  EXPECT_EQ(t.turns, 3);
  EXPECT_EQ(t.episode_id, 4u);
}

TEST_F(GatewayEpisodes, ServiceLifeCycleDeadlinesAndErrors) {
  gw.open_deadline_s = 0.05;
  gw.request_deadline_s = 0.2;
  gw.idle_deadline_s = 0.3;
  GatewayService s(gw, sampling, 8, 256);
  EXPECT_EQ(request_error_status([&] { s.open(); }), 503);  // nothing admitted yet
  std::vector<std::unique_ptr<GatewayEpisode>> group;
  group.push_back(episode(0, 0));
  group.push_back(episode(1, 0));
  s.add_group(0, std::move(group));
  const json a = s.open(), b = s.open();
  const uint64_t ia = a["id"], ib = b["id"];
  EXPECT_NE(ia, ib);
  EXPECT_EQ(s.episode_of_key(a["api_key"]).value(), ia);
  EXPECT_FALSE(s.episode_of_key("fgk-nope"));
  EXPECT_EQ(request_error_status([&] { s.chat(99, {{"messages", a["task"]["messages"]}}); }), 404);
  EXPECT_EQ(request_error_status([&] { s.chat(ia, {{"messages", a["task"]["messages"]}, {"n", 2}}); }), 400);

  // A fake rollout loop answers every job (each with the same generation).
  std::atomic<bool> quit = false, answer = true;
  std::thread loop([&] {
    while (!quit) {
      for (const GenerationJob& j : s.take_jobs()) {
        EXPECT_EQ(j.request.sampling.stop_tokens, std::vector<int32_t>{kEndOfTurn});
        EXPECT_LE(j.request.sampling.max_new_tokens, 8);
        if (answer) s.fulfil(result_for(j, {'4', '2', kEndOfTurn}));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const GenerationReply r = s.chat(ia, {{"messages", a["task"]["messages"]}});
  EXPECT_EQ(r.result.tokens, (Tokens{'4', '2', kEndOfTurn}));
  EXPECT_EQ(r.call_index, 0);
  EXPECT_EQ(r.finish_reason, "stop");
  // No generation within the request deadline: 504, nothing recorded.
  answer = false;
  EXPECT_EQ(request_error_status([&] { s.chat(ia, {{"messages", a["task"]["messages"]}}); }), 504);
  answer = true;
  EXPECT_EQ(s.describe(ia)["calls"].size(), 1u);

  s.close(ia, json::object());
  EXPECT_EQ(request_error_status([&] { s.chat(ia, {{"messages", a["task"]["messages"]}}); }), 409);
  EXPECT_EQ(request_error_status([&] { s.close(ia, json::object()); }), 409);
  EXPECT_TRUE(s.take_finished_groups().empty());  // b is still open
  // b goes idle: abandoned, and the group is complete.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  s.expire_idle();
  const auto groups = s.take_finished_groups();
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].episodes.size(), 2u);
  EXPECT_EQ(groups[0].episodes[0].episode_id, ia);
  EXPECT_FALSE(groups[0].episodes[0].abandoned);
  EXPECT_EQ(groups[0].episodes[0].calls.size(), 1u);
  EXPECT_TRUE(groups[0].episodes[1].abandoned);
  EXPECT_NE(groups[0].episodes[1].end_reason.find("idle"), std::string::npos);
  const GatewayCounters c = s.counters();
  EXPECT_EQ(c.opened, 2);
  EXPECT_EQ(c.closed, 1);
  EXPECT_EQ(c.abandoned, 1);
  EXPECT_EQ(c.timeouts, 1);
  s.stop("the run has finished");
  EXPECT_EQ(request_error_status([&] { s.open(); }), 410);
  quit = true;
  loop.join();
}

}  // namespace
}  // namespace forge
