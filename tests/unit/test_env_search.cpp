// search: the generated knowledge graph, explore-and-evolve questions, the
// lookup/find tools, the solver and the verifier.
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <set>
#include <string>

#include "core/error.hpp"
#include "env/process_signals.hpp"
#include "env/search_env.hpp"

namespace forge {
namespace {

EnvConfig quiet() {
  EnvConfig c;
  c.tool_error_rate = 0;
  c.timeout_rate = 0;
  return c;
}

TEST(EnvSearch, GraphHasUniqueNamesTagsAndTypedRelations) {
  Rng rng(3);
  for (int n : {6, 10, 40}) {
    const KnowledgeGraph kg = KnowledgeGraph::generate(rng, n);
    ASSERT_EQ(static_cast<int>(kg.entities.size()), n);
    std::set<std::string> names, tags;
    for (const Entity& e : kg.entities) {
      names.insert(e.name);
      tags.insert(e.tag);
      EXPECT_EQ(e.relations.size(), e.type == "person" ? 3u : 2u);
      // The schema (knowledge_graph.hpp): each relation's target type.
      static const std::map<std::string, std::string> kTargetType = {
          {"works_at", "org"},     {"born_in", "city"}, {"friend", "person"}, {"based_in", "city"},
          {"founder", "person"}, {"mayor", "person"},  {"twin", "city"}};
      for (const auto& [r, t] : e.relations) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, n);
        EXPECT_NE(&kg.entities[t], &e) << e.name << " " << r << " points to itself";
        ASSERT_TRUE(kTargetType.count(r)) << "relation " << r;
        EXPECT_EQ(kg.entities[t].type, kTargetType.at(r)) << e.name << " " << r;
      }
    }
    EXPECT_EQ(static_cast<int>(names.size()), n);
    EXPECT_EQ(static_cast<int>(tags.size()), n);
  }
  EXPECT_THROW(KnowledgeGraph::generate(rng, 41), InputError);
}

// A walk stuck short of env.search_min_hops starts again, on another graph
// if need be (on 6 entities a third of the walks of 4 hops stuck at 2 or 3,
// and those questions were asked; at 8 entities about 1 graph in 80 holds
// no 6-hop path at all); a graph too small for any such path gives none.
TEST(EnvSearch, EveryQuestionHasAtLeastTheFewestHops) {
  EnvConfig c = quiet();
  c.max_tool_calls = 20;
  for (const auto& [entities, hops] : {std::pair{6, 4}, std::pair{8, 6}}) {
    c.search_entities = entities;
    c.search_min_hops = c.search_max_hops = hops;
    SearchEnv env(c);
    for (uint64_t seed = 0; seed < 400; ++seed) {
      env.reset(seed);
      ASSERT_EQ(env.question().hops(), hops) << entities << " entities, seed " << seed;
    }
  }
  Rng rng(5);
  const KnowledgeGraph six = KnowledgeGraph::generate(rng, 6);
  EXPECT_FALSE(explore_and_evolve(six, rng, 6, 6, 0).has_value()) << "6 hops visit 7 entities";
  EXPECT_TRUE(explore_and_evolve(six, rng, 1, 6, 0).has_value());
}

TEST(EnvSearch, QuestionsAreObfuscatedAndNameNoIntermediateEntity) {
  EnvConfig c = quiet();
  c.search_obfuscate = 0.5;
  SearchEnv env(c);
  int obfuscated = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const Task t = env.reset(seed);
    const MultiHopQuestion& q = env.question();
    ASSERT_GE(q.hops(), 1);
    ASSERT_LE(q.hops(), c.search_max_hops);
    EXPECT_EQ(t.steps_needed, q.hops() + (q.obfuscated ? 1 : 0));
    EXPECT_LE(t.request.size(), 80u) << t.request;
    for (size_t i = 1; i < q.path.size(); ++i)
      EXPECT_EQ(t.request.find(env.graph().entities[q.path[i]].name), std::string::npos)
          << t.request;
    const Entity& seed_entity = env.graph().entities[q.path[0]];
    if (q.obfuscated) {
      ++obfuscated;
      EXPECT_EQ(t.request.find(seed_entity.name), std::string::npos) << t.request;
      EXPECT_NE(t.request.find(seed_entity.description()), std::string::npos) << t.request;
    } else {
      EXPECT_NE(t.request.find(seed_entity.name), std::string::npos) << t.request;
    }
  }
  EXPECT_GT(obfuscated, 100);
  EXPECT_LT(obfuscated, 200);
}

TEST(EnvSearch, SolverSolvesEveryTask) {
  SearchEnv env(quiet());
  for (uint64_t seed = 0; seed < 500; ++seed) {
    const Task t = env.reset(seed);
    const Solution s = env.solve();
    ASSERT_EQ(static_cast<int>(s.calls.size()), t.steps_needed);
    for (const ToolCall& call : s.calls) {
      const Observation o = env.step(call);
      ASSERT_EQ(o.kind, ObservationKind::kOk) << t.request << " " << call.args << ": " << o.text;
      EXPECT_EQ(o.signals[0].kind, signal::kUsefulCall) << call.tool << " " << call.args;
    }
    EXPECT_EQ(env.verify(s.answer), 1.0f) << t.request;
  }
}

// A used environment gives a seed's task as a fresh one does (no state
// from earlier tasks leaks into the next).
TEST(EnvSearch, SameSeedSameTask) {
  SearchEnv used(quiet());
  for (uint64_t seed = 0; seed < 30; ++seed) {
    SearchEnv fresh(quiet());
    EXPECT_EQ(used.reset(seed * 7 % 30).request, fresh.reset(seed * 7 % 30).request);
    EXPECT_EQ(used.solve().calls, fresh.solve().calls);
  }
}

TEST(EnvSearch, VerifierRejectsWrongEntities) {
  SearchEnv env(quiet());
  for (uint64_t seed = 0; seed < 100; ++seed) {
    env.reset(seed);
    const std::string answer = env.solve().answer;
    std::string lower = answer;
    lower[0] = static_cast<char>(std::tolower(lower[0]));
    EXPECT_EQ(env.verify(lower), 1.0f);
    EXPECT_EQ(env.verify(answer + "x"), 0.0f);
    EXPECT_EQ(env.verify(""), 0.0f);
    // Quoted, with a full stop or spaces around it: the same name.
    for (const std::string& dressed : {"\"" + answer + "\"", "'" + answer + "'", answer + ".", " " + answer + " ",
                                       "\"" + answer + ".\"", "'" + answer + "'."})
      EXPECT_EQ(env.verify(dressed), 1.0f) << dressed;
    for (const std::string& other : {"\"" + answer, answer + "'", "'" + answer + "\"", answer + "..", answer + "!"})
      EXPECT_EQ(env.verify(other), 0.0f) << other;
    for (const Entity& e : env.graph().entities)
      if (e.name != answer) {
        EXPECT_EQ(env.verify(e.name), 0.0f) << e.name;
      }
  }
}

TEST(EnvSearch, LookupErrorsNameWhatExists) {
  SearchEnv env(quiet());
  env.reset(5);
  const std::string someone = env.graph().entities[0].name;
  const Observation unknown = env.step({"lookup", "Qqqq,works_at"});
  EXPECT_EQ(unknown.kind, ObservationKind::kBadCall);
  EXPECT_NE(unknown.text.find("unknown entity"), std::string::npos);
  const Observation bad_rel = env.step({"lookup", someone + ",color"});
  EXPECT_EQ(bad_rel.kind, ObservationKind::kBadCall);
  EXPECT_NE(bad_rel.text.find("has: "), std::string::npos) << bad_rel.text;
  EXPECT_EQ(env.step({"lookup", someone}).kind, ObservationKind::kBadCall);
  EXPECT_EQ(env.step({"find", ""}).kind, ObservationKind::kBadCall);
  const Observation none = env.step({"find", "zzz"});
  EXPECT_EQ(none.kind, ObservationKind::kOk);
  EXPECT_EQ(none.text, "no match");
  EXPECT_EQ(none.signals[0].kind, signal::kValidCall);
}

}  // namespace
}  // namespace forge
