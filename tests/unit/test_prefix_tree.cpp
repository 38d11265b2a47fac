#include "tree/prefix_tree.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <utility>

#include "core/error.hpp"

namespace forge {
namespace {

Sample make(std::vector<int32_t> tokens, std::vector<uint8_t> trainable) {
  return Sample{std::move(tokens), std::move(trainable)};
}

std::vector<std::pair<int32_t, int32_t>> refs_of(const PrefixForest& f, int32_t n) {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (int32_t r = f.ref_begin[n]; r < f.ref_begin[n + 1]; ++r)
    out.emplace_back(f.refs[r].sample, f.refs[r].position);
  return out;
}

using Refs = std::vector<std::pair<int32_t, int32_t>>;

// Query i sees exactly its ancestors and itself under the subtree_end mask.
void expect_mask_is_ancestry(const PrefixForest& f) {
  for (int32_t i = 0; i < f.size(); ++i) {
    std::set<int32_t> visible, ancestry;
    for (int32_t j = 0; j <= i; ++j)
      if (i < f.subtree_end[j]) visible.insert(j);
    for (int32_t a = i; a >= 0; a = f.parent[a]) ancestry.insert(a);
    EXPECT_EQ(visible, ancestry) << "node " << i;
  }
}

// Array sizes, pre-order parents, depths and nesting of subtree_end.
void expect_well_formed(const PrefixForest& f) {
  const size_t n = f.token.size();
  ASSERT_EQ(f.depth.size(), n);
  ASSERT_EQ(f.parent.size(), n);
  ASSERT_EQ(f.subtree_end.size(), n);
  ASSERT_EQ(f.ref_begin.size(), n + 1);
  EXPECT_EQ(f.ref_begin.front(), 0);
  EXPECT_EQ(static_cast<size_t>(f.ref_begin.back()), f.refs.size());
  for (int32_t i = 0; i < f.size(); ++i) {
    EXPECT_LE(f.ref_begin[i], f.ref_begin[i + 1]);
    EXPECT_GT(f.subtree_end[i], i);
    EXPECT_LE(f.subtree_end[i], f.size());
    if (f.parent[i] < 0) {
      EXPECT_EQ(f.depth[i], 0);
    } else {
      EXPECT_LT(f.parent[i], i);
      EXPECT_EQ(f.depth[i], f.depth[f.parent[i]] + 1);
      EXPECT_LE(f.subtree_end[i], f.subtree_end[f.parent[i]]);
    }
  }
}

TEST(PrefixTree, TwoSamplesSharingAPrefix) {
  const std::vector<Sample> s = {make({1, 2, 3, 4}, {0, 0, 1, 1}), make({1, 2, 5}, {0, 1, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  EXPECT_EQ(f.token, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(f.depth, (std::vector<int32_t>{0, 1, 2, 3, 2}));
  EXPECT_EQ(f.parent, (std::vector<int32_t>{-1, 0, 1, 2, 1}));
  EXPECT_EQ(f.subtree_end, (std::vector<int32_t>{5, 5, 4, 4, 5}));
  EXPECT_EQ(f.ref_begin, (std::vector<int32_t>{0, 0, 1, 2, 3, 4}));
  EXPECT_EQ(refs_of(f, 1), (Refs{{1, 1}}));
  EXPECT_EQ(refs_of(f, 2), (Refs{{0, 2}}));
  EXPECT_EQ(refs_of(f, 3), (Refs{{0, 3}}));
  EXPECT_EQ(refs_of(f, 4), (Refs{{1, 2}}));
  expect_mask_is_ancestry(f);
}

TEST(PrefixTree, SampleThatIsAPrefixOfAnother) {
  // The shorter sample comes second and adds no node, only refs.
  const std::vector<Sample> s = {make({7, 8, 9, 10}, {0, 0, 1, 1}), make({7, 8, 9}, {0, 1, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  EXPECT_EQ(f.token, (std::vector<int32_t>{7, 8, 9, 10}));
  EXPECT_EQ(f.parent, (std::vector<int32_t>{-1, 0, 1, 2}));
  EXPECT_EQ(f.subtree_end, (std::vector<int32_t>{4, 4, 4, 4}));
  EXPECT_EQ(refs_of(f, 0), Refs{});
  EXPECT_EQ(refs_of(f, 1), (Refs{{1, 1}}));
  EXPECT_EQ(refs_of(f, 2), (Refs{{0, 2}, {1, 2}}));
  EXPECT_EQ(refs_of(f, 3), (Refs{{0, 3}}));
}

TEST(PrefixTree, DuplicateSamplesDoubleTheRefs) {
  const Sample a = make({3, 1, 4, 1}, {0, 0, 1, 1});
  const PrefixForest f = build_prefix_forest({a, a}, true);
  EXPECT_EQ(f.token, (std::vector<int32_t>{3, 1, 4, 1}));
  EXPECT_EQ(f.ref_begin, (std::vector<int32_t>{0, 0, 0, 2, 4}));
  EXPECT_EQ(refs_of(f, 2), (Refs{{0, 2}, {1, 2}}));
  EXPECT_EQ(refs_of(f, 3), (Refs{{0, 3}, {1, 3}}));
}

TEST(PrefixTree, BranchAtTheFirstTokenMakesTwoRoots) {
  const std::vector<Sample> s = {make({1, 2}, {0, 1}), make({3, 4, 5}, {0, 0, 1}),
                                 make({1, 6}, {0, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  EXPECT_EQ(f.token, (std::vector<int32_t>{1, 2, 6, 3, 4, 5}));
  EXPECT_EQ(f.depth, (std::vector<int32_t>{0, 1, 1, 0, 1, 2}));
  EXPECT_EQ(f.parent, (std::vector<int32_t>{-1, 0, 0, -1, 3, 4}));
  EXPECT_EQ(f.subtree_end, (std::vector<int32_t>{3, 2, 3, 6, 6, 6}));
  EXPECT_EQ(refs_of(f, 2), (Refs{{2, 1}}));
  EXPECT_EQ(refs_of(f, 5), (Refs{{1, 2}}));
  expect_mask_is_ancestry(f);
}

TEST(PrefixTree, SingleTokenSamples) {
  const PrefixForest one = build_prefix_forest({make({42}, {0})}, true);
  EXPECT_EQ(one.token, (std::vector<int32_t>{42}));
  EXPECT_EQ(one.parent, (std::vector<int32_t>{-1}));
  EXPECT_EQ(one.subtree_end, (std::vector<int32_t>{1}));
  EXPECT_EQ(one.ref_begin, (std::vector<int32_t>{0, 0}));

  // A single token that is also the first token of a longer sample.
  const PrefixForest two = build_prefix_forest({make({42, 5}, {0, 1}), make({42}, {0})}, true);
  EXPECT_EQ(two.token, (std::vector<int32_t>{42, 5}));
  EXPECT_EQ(two.subtree_end, (std::vector<int32_t>{2, 2}));
}

TEST(PrefixTree, ChildrenInOrderOfFirstAppearance) {
  const std::vector<Sample> s = {make({1, 9, 2}, {0, 1, 1}), make({1, 3}, {0, 1}),
                                 make({1, 9, 0}, {0, 1, 1}), make({1, 5}, {0, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  EXPECT_EQ(f.token, (std::vector<int32_t>{1, 9, 2, 0, 3, 5}));
  EXPECT_EQ(f.parent, (std::vector<int32_t>{-1, 0, 1, 1, 0, 0}));
  EXPECT_EQ(f.subtree_end, (std::vector<int32_t>{6, 4, 3, 4, 5, 6}));
  EXPECT_EQ(refs_of(f, 1), (Refs{{0, 1}, {2, 1}}));
}

TEST(PrefixTree, WithoutMergingEachSampleIsItsOwnChain) {
  const std::vector<Sample> s = {make({1, 2, 3}, {0, 1, 1}), make({1, 2}, {0, 1}), make({4}, {0})};
  const PrefixForest f = build_prefix_forest(s, false);
  EXPECT_EQ(f.token, (std::vector<int32_t>{1, 2, 3, 1, 2, 4}));
  EXPECT_EQ(f.depth, (std::vector<int32_t>{0, 1, 2, 0, 1, 0}));
  EXPECT_EQ(f.parent, (std::vector<int32_t>{-1, 0, 1, -1, 3, -1}));
  EXPECT_EQ(f.subtree_end, (std::vector<int32_t>{3, 3, 3, 5, 5, 6}));
  EXPECT_EQ(f.ref_begin, (std::vector<int32_t>{0, 0, 1, 2, 2, 3, 3}));
  EXPECT_EQ(refs_of(f, 1), (Refs{{0, 1}}));
  EXPECT_EQ(refs_of(f, 2), (Refs{{0, 2}}));
  EXPECT_EQ(refs_of(f, 4), (Refs{{1, 1}}));
  expect_mask_is_ancestry(f);
}

template <typename F>
void expect_input_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InputError, expected one mentioning: " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PrefixTree, RejectsBadSamplesNamingTheIndex) {
  const Sample ok = make({1, 2}, {0, 1});
  for (bool merge : {true, false}) {
    auto build = [merge](std::vector<Sample> s) {
      return [s, merge] { build_prefix_forest(s, merge); };
    };
    expect_input_error(build({ok, make({}, {})}), "sample 1: no tokens");
    expect_input_error(build({ok, ok, make({1, 2}, {0})}),
                       "sample 2: 2 tokens but 1 trainable flags");
    expect_input_error(build({ok, ok, ok, make({1, 2}, {1, 1})}),
                       "sample 3: trainable flag at position 0 (no context to predict it from)");
  }
}

// The index range bounds the merged tree, not the samples unmerged: 40
// calls repeating one 50-token context (2,040 tokens) merge into 90 nodes
// and fit a bound of 100 nodes that the linear layout passes (it refused
// any batch of 2^31 tokens unmerged, however small its tree).
TEST(PrefixTree, TheNodeBoundCountsTheMergedTree) {
  std::vector<Sample> calls;
  std::vector<int32_t> context(50);
  for (int32_t i = 0; i < 50; ++i) context[i] = i;
  for (int32_t c = 0; c < 40; ++c) {
    Sample s = make(context, std::vector<uint8_t>(50, 0));
    s.tokens.push_back(1000 + c);
    s.trainable.push_back(1);
    calls.push_back(std::move(s));
  }
  EXPECT_EQ(build_prefix_forest(calls, true, 100).size(), 90);
  expect_input_error([&] { build_prefix_forest(calls, false, 100); },
                     "the batch's prefix tree has more than 100 nodes (more than int32 indices allow; its samples hold "
                     "2040 tokens unmerged)");
  expect_input_error([&] { build_prefix_forest(calls, true, 30); }, "prefix tree has more than 30 nodes");
  for (Sample& s : calls) s.trainable.assign(s.tokens.size(), 1), s.trainable[0] = 0;
  expect_input_error([&] { build_prefix_forest(calls, true, 1500); },
                     "the batch's samples have more than 1500 trained tokens");
}

TEST(PrefixTree, LinearTokenCount) {
  EXPECT_EQ(linear_token_count({make({1, 2, 3}, {0, 0, 0}), make({1}, {0})}), 4);
  EXPECT_EQ(linear_token_count({}), 0);
  EXPECT_EQ(build_prefix_forest({}, true).size(), 0);
}

// Random multi-turn batches over a small alphabet: the trie has one node per
// distinct sample prefix, each ref points at the node of its own prefix, and
// siblings appear in order of first appearance.
TEST(PrefixTree, RandomBatchesMatchTheirPrefixSets) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<Sample> s;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) {
      Sample x;
      if (!s.empty() && rng() % 2) {  // continue an earlier sample (next turn)
        const Sample& base = s[rng() % s.size()];
        const size_t keep = 1 + rng() % base.tokens.size();
        x.tokens.assign(base.tokens.begin(), base.tokens.begin() + keep);
      }
      const size_t extra = (x.tokens.empty() ? 1 : 0) + rng() % 6;
      for (size_t e = 0; e < extra; ++e) x.tokens.push_back(static_cast<int32_t>(rng() % 3));
      x.trainable.resize(x.tokens.size());
      for (size_t p = 1; p < x.tokens.size(); ++p) x.trainable[p] = rng() % 2;
      s.push_back(std::move(x));
    }
    const PrefixForest f = build_prefix_forest(s, true);
    expect_well_formed(f);
    expect_mask_is_ancestry(f);

    // Node prefixes are distinct and are exactly the sample prefixes.
    std::map<std::vector<int32_t>, std::pair<int32_t, int32_t>> first_seen;  // prefix -> (s, pos)
    for (int32_t k = 0; k < n; ++k)
      for (size_t p = 0; p < s[k].tokens.size(); ++p)
        first_seen.try_emplace(
            std::vector<int32_t>(s[k].tokens.begin(), s[k].tokens.begin() + p + 1),
            std::make_pair(k, static_cast<int32_t>(p)));
    std::vector<std::vector<int32_t>> prefix(f.size());
    std::set<std::vector<int32_t>> distinct;
    for (int32_t i = 0; i < f.size(); ++i) {
      if (f.parent[i] >= 0) prefix[i] = prefix[f.parent[i]];
      prefix[i].push_back(f.token[i]);
      distinct.insert(prefix[i]);
      ASSERT_TRUE(first_seen.count(prefix[i])) << "node " << i << " is no sample prefix";
    }
    EXPECT_EQ(distinct.size(), first_seen.size());
    EXPECT_EQ(static_cast<size_t>(f.size()), first_seen.size());

    // Siblings (and roots) in order of first appearance.
    std::map<int32_t, int32_t> last_child;  // parent -> last child seen
    for (int32_t i = 0; i < f.size(); ++i) {
      auto it = last_child.find(f.parent[i]);
      if (it != last_child.end()) {
        EXPECT_LT(first_seen[prefix[it->second]], first_seen[prefix[i]]) << "node " << i;
      }
      last_child[f.parent[i]] = i;
    }

    // Refs: exactly the trainable (sample, position) pairs, each on its prefix's node.
    std::multiset<std::pair<int32_t, int32_t>> want, got;
    for (int32_t k = 0; k < n; ++k)
      for (size_t p = 0; p < s[k].tokens.size(); ++p)
        if (s[k].trainable[p]) want.emplace(k, static_cast<int32_t>(p));
    for (int32_t i = 0; i < f.size(); ++i)
      for (auto [k, p] : refs_of(f, i)) {
        got.emplace(k, p);
        EXPECT_EQ(prefix[i],
                  std::vector<int32_t>(s[k].tokens.begin(), s[k].tokens.begin() + p + 1));
      }
    EXPECT_EQ(got, want);

    // The linear layout holds every sample verbatim.
    const PrefixForest lin = build_prefix_forest(s, false);
    expect_well_formed(lin);
    ASSERT_EQ(lin.size(), linear_token_count(s));
    int32_t at = 0;
    for (int32_t k = 0; k < n; ++k) {
      const int32_t len = static_cast<int32_t>(s[k].tokens.size());
      for (int32_t p = 0; p < len; ++p, ++at) {
        EXPECT_EQ(lin.token[at], s[k].tokens[p]);
        EXPECT_EQ(lin.depth[at], p);
        EXPECT_EQ(lin.subtree_end[at], at - p + len);
        const Refs want_refs = s[k].trainable[p] ? Refs{{k, p}} : Refs{};
        EXPECT_EQ(refs_of(lin, at), want_refs);
      }
    }
  }
}

}  // namespace
}  // namespace forge
