// search: multi-hop questions over a generated knowledge graph
// (knowledge_graph.hpp: explore and evolve, then obfuscate).
//
// Tools:
//   find(tag)                 -> the name of the entity with that tag word,
//                                or "no match"
//   lookup(entity,relation)   -> the name of the relation's target; an
//                                unknown entity or relation is a bad-argument
//                                error, and an unknown relation's lists the
//                                entity's relations
// A task needs one lookup per hop, plus one find when the seed is described
// rather than named. A call is useful when it resolves the seed's tag or
// follows the question's path (first time). verify(): 1 for the name of the
// walk's last entity (case-insensitive), else 0. The solver finds the seed
// if needed, then looks up each hop.
#pragma once
#include "env/environment.hpp"
#include "env/knowledge_graph.hpp"

namespace forge {

class SearchEnv : public Environment {
 public:
  using Environment::Environment;
  std::string name() const override { return "search"; }
  Solution solve() const override;

  const KnowledgeGraph& graph() const { return kg_; }
  const MultiHopQuestion& question() const { return q_; }

 protected:
  Task generate(uint64_t seed) override;
  ToolResult call_tool(const ToolCall& call) override;
  float score(std::string_view answer) const override;

 private:
  KnowledgeGraph kg_;
  MultiHopQuestion q_;
  bool found_seed_ = false;
  std::vector<bool> hop_done_;
};

}  // namespace forge
