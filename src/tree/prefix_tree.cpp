#include "tree/prefix_tree.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>

#include "core/error.hpp"

namespace forge {
namespace {

void validate(const std::vector<Sample>& samples) {
  for (size_t s = 0; s < samples.size(); ++s) {
    const Sample& x = samples[s];
    auto fail = [s](const std::string& what) {
      throw InputError("sample " + std::to_string(s) + ": " + what);
    };
    if (x.tokens.empty()) fail("no tokens");
    if (x.trainable.size() != x.tokens.size())
      fail(std::to_string(x.tokens.size()) + " tokens but " + std::to_string(x.trainable.size()) +
           " trainable flags");
    if (x.trainable[0]) fail("trainable flag at position 0 (no context to predict it from)");
  }
}

}  // namespace

int64_t linear_token_count(const std::vector<Sample>& samples) {
  int64_t n = 0;
  for (const Sample& s : samples) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

PrefixForest build_prefix_forest(const std::vector<Sample>& samples, bool merge, int64_t max_nodes) {
  validate(samples);
  const int64_t total = linear_token_count(samples);
  // Nodes and trained tokens are int32 indices: the merged tree must fit,
  // not the samples unmerged (long agent episodes repeat their contexts).
  const auto too_big = [&](const std::string& what) {  // "prefix tree has N nodes"
    return InputError("the batch's " + what + " (more than int32 indices allow; its samples hold " +
                      std::to_string(total) +
                      " tokens unmerged): train on fewer or shorter episodes per step");
  };

  // Trie in insertion order under a virtual super-root 0. Children are linked
  // first_child -> next_sibling in order of first appearance. Without merging
  // every token opens a new node, so each sample becomes its own chain.
  std::vector<int32_t> tok{0}, up{-1}, first_child{-1}, last_child{-1}, next_sibling{-1};
  // Merged, the tree may be far smaller than the samples: reserved up to 2^24.
  const int64_t expected = std::min(total, merge ? int64_t{1} << 24 : max_nodes);
  for (auto* v : {&tok, &up, &first_child, &last_child, &next_sibling}) v->reserve(expected + 1);
  std::unordered_map<uint64_t, int32_t> child_of;  // (parent << 32 | token) -> child
  if (merge) child_of.reserve(static_cast<size_t>(expected));
  std::vector<int32_t> ref_node;  // trie node of each ref, in sample order
  std::vector<SampleRef> trie_refs;

  for (size_t s = 0; s < samples.size(); ++s) {
    const Sample& x = samples[s];
    int32_t node = 0;
    for (size_t pos = 0; pos < x.tokens.size(); ++pos) {
      const int32_t fresh = static_cast<int32_t>(tok.size());
      int32_t next = fresh;
      if (merge) {
        const int32_t last = last_child[node];  // shared chains skip the hash
        if (last >= 0 && tok[last] == x.tokens[pos]) {
          next = last;
        } else {
          const uint64_t key =
              (static_cast<uint64_t>(node) << 32) | static_cast<uint32_t>(x.tokens[pos]);
          next = child_of.try_emplace(key, fresh).first->second;
        }
      }
      if (next == fresh) {
        if (static_cast<int64_t>(tok.size()) > max_nodes)
          throw too_big("prefix tree has more than " + std::to_string(max_nodes) + " nodes");
        tok.push_back(x.tokens[pos]);
        up.push_back(node);
        first_child.push_back(-1);
        last_child.push_back(-1);
        next_sibling.push_back(-1);
        if (last_child[node] < 0)
          first_child[node] = fresh;
        else
          next_sibling[last_child[node]] = fresh;
        last_child[node] = fresh;
      }
      node = next;
      if (x.trainable[pos]) {
        if (static_cast<int64_t>(trie_refs.size()) >= max_nodes)
          throw too_big("samples have more than " + std::to_string(max_nodes) + " trained tokens");
        ref_node.push_back(node);
        trie_refs.push_back({static_cast<int32_t>(s), static_cast<int32_t>(pos)});
      }
    }
  }

  // Iterative DFS pre-order: visit v, descend to its first child, or else
  // close v and its ancestors up to the first one with a next sibling.
  const int32_t n = static_cast<int32_t>(tok.size()) - 1;
  PrefixForest f;
  f.token.resize(n);
  f.depth.resize(n);
  f.parent.resize(n);
  f.subtree_end.resize(n);
  std::vector<int32_t> index(tok.size(), -1);  // trie node -> forest index
  int32_t count = 0;
  for (int32_t v = first_child[0]; v > 0;) {
    const int32_t i = count++;
    index[v] = i;
    f.token[i] = tok[v];
    f.parent[i] = index[up[v]];
    f.depth[i] = up[v] == 0 ? 0 : f.depth[f.parent[i]] + 1;
    if (first_child[v] >= 0) {
      v = first_child[v];
      continue;
    }
    for (;;) {
      f.subtree_end[index[v]] = count;
      if (next_sibling[v] >= 0) {
        v = next_sibling[v];
        break;
      }
      v = up[v];
      if (v == 0) break;
    }
  }

  // Refs grouped by node (counting sort); within a node in sample order.
  f.ref_begin.assign(n + 1, 0);
  for (int32_t node : ref_node) ++f.ref_begin[index[node] + 1];
  for (int32_t i = 0; i < n; ++i) f.ref_begin[i + 1] += f.ref_begin[i];
  f.refs.resize(trie_refs.size());
  std::vector<int32_t> cursor(f.ref_begin.begin(), f.ref_begin.end() - 1);
  for (size_t r = 0; r < trie_refs.size(); ++r) f.refs[cursor[index[ref_node[r]]]++] = trie_refs[r];
  return f;
}

}  // namespace forge
