#include "tree/packed_batch.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <utility>

#include "core/error.hpp"

namespace forge {
namespace {

using Refs = std::vector<std::pair<int32_t, int32_t>>;
using Ints = std::vector<int32_t>;

Sample make(Ints tokens, std::vector<uint8_t> trainable) {
  return Sample{std::move(tokens), std::move(trainable)};
}

Refs entry_refs(const PackedBin& b, int32_t e) {
  Refs out;
  for (int32_t r = b.ref_begin[e]; r < b.ref_begin[e + 1]; ++r)
    out.emplace_back(b.refs[r].sample, b.refs[r].position);
  return out;
}

// Parent of each bin token implied by the mask: the nearest j < i whose
// subtree contains i; -1 when none does (the token starts a piece).
Ints mask_parents(const PackedBin& b) {
  Ints parent(b.tokens(), -1);
  for (int32_t i = 0; i < b.tokens(); ++i)
    for (int32_t j = i - 1; j >= 0; --j)
      if (b.subtree_end[j] > i) {
        parent[i] = j;
        break;
      }
  return parent;
}

// Checks every invariant of a packing of `samples` (merged into `forest`).
void check_packing(const std::vector<Sample>& samples, const PrefixForest& forest,
                   const std::vector<PackedBin>& bins, int32_t max_tokens) {
  std::multiset<std::pair<int32_t, int32_t>> want, got;
  for (int32_t s = 0; s < static_cast<int32_t>(samples.size()); ++s)
    for (int32_t p = 0; p < static_cast<int32_t>(samples[s].tokens.size()); ++p)
      if (samples[s].trainable[p]) want.emplace(s, p);
  std::map<int32_t, int> entries_of_node;
  int64_t tokens = 0;

  for (size_t bi = 0; bi < bins.size(); ++bi) {
    SCOPED_TRACE("bin " + std::to_string(bi));
    const PackedBin& b = bins[bi];
    const int32_t T = b.tokens();
    tokens += T;
    ASSERT_GT(T, 0);
    ASSERT_LE(T, max_tokens);
    ASSERT_EQ(b.position.size(), b.token.size());
    ASSERT_EQ(b.subtree_end.size(), b.token.size());

    // Subtrees nest (the mask is a forest) and positions are depths.
    const Ints parent = mask_parents(b);
    for (int32_t i = 0; i < T; ++i) {
      ASSERT_GT(b.subtree_end[i], i);
      ASSERT_LE(b.subtree_end[i], T);
      if (parent[i] < 0) {
        EXPECT_EQ(b.position[i], 0) << "token " << i;
      } else {
        EXPECT_LE(b.subtree_end[i], b.subtree_end[parent[i]]) << "token " << i;
        EXPECT_EQ(b.position[i], b.position[parent[i]] + 1) << "token " << i;
      }
    }

    // Rows ascending and unique, each with at least one entry.
    const int32_t R = b.rows(), E = b.entries();
    ASSERT_EQ(b.row_begin.size(), static_cast<size_t>(R + 1));
    ASSERT_EQ(b.entry_node.size(), static_cast<size_t>(E));
    ASSERT_EQ(b.ref_begin.size(), static_cast<size_t>(E + 1));
    EXPECT_EQ(b.row_begin[0], 0);
    EXPECT_EQ(b.row_begin[R], E);
    EXPECT_EQ(b.ref_begin[0], 0);
    EXPECT_EQ(static_cast<size_t>(b.ref_begin[E]), b.refs.size());
    for (int32_t r = 0; r < R; ++r) {
      ASSERT_GE(b.head_row[r], 0);
      ASSERT_LT(b.head_row[r], T);
      if (r > 0) {
        EXPECT_LT(b.head_row[r - 1], b.head_row[r]);
      }
      EXPECT_LT(b.row_begin[r], b.row_begin[r + 1]);
      for (int32_t e = b.row_begin[r]; e < b.row_begin[r + 1]; ++e) {
        if (e > b.row_begin[r]) {
          EXPECT_LT(b.entry_node[e - 1], b.entry_node[e]);
        }
        const int32_t node = b.entry_node[e];
        ++entries_of_node[node];
        EXPECT_EQ(b.target[e], forest.token[node]);
        Refs forest_refs;
        for (int32_t k = forest.ref_begin[node]; k < forest.ref_begin[node + 1]; ++k)
          forest_refs.emplace_back(forest.refs[k].sample, forest.refs[k].position);
        const Refs refs = entry_refs(b, e);
        EXPECT_EQ(refs, forest_refs) << "entry " << e;
        EXPECT_FALSE(refs.empty());

        // The row's context in the bin is the sample's prefix before the target.
        Ints context;
        for (int32_t a = b.head_row[r]; a >= 0; a = parent[a]) {
          context.insert(context.begin(), b.token[a]);
          EXPECT_EQ(b.position[a],
                    b.position[b.head_row[r]] - static_cast<int32_t>(context.size()) + 1);
        }
        for (auto [s, p] : refs) {
          got.emplace(s, p);
          const Sample& x = samples[s];
          EXPECT_TRUE(x.trainable[p]);
          EXPECT_EQ(x.tokens[p], b.target[e]);
          EXPECT_EQ(context, Ints(x.tokens.begin(), x.tokens.begin() + p))
              << "entry " << e << " ref (" << s << ", " << p << ")";
        }
      }
    }
  }
  EXPECT_EQ(got, want);
  EXPECT_GE(tokens, forest.size());
  for (int32_t n = 0; n < forest.size(); ++n)
    if (forest.ref_begin[n + 1] > forest.ref_begin[n]) {
      EXPECT_EQ(entries_of_node[n], 1) << "node " << n;
    }
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

TEST(PackedBatch, WholeForestInOneBin) {
  const std::vector<Sample> s = {make({1, 2, 3, 4}, {0, 0, 1, 1}), make({1, 2, 5}, {0, 0, 1}),
                                 make({6, 7}, {0, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  const auto bins = pack_forest(f, 16);
  ASSERT_EQ(bins.size(), 1u);
  const PackedBin& b = bins[0];
  EXPECT_EQ(b.token, (Ints{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(b.position, (Ints{0, 1, 2, 3, 2, 0, 1}));
  EXPECT_EQ(b.subtree_end, (Ints{5, 5, 4, 4, 5, 7, 7}));
  // Row 1 (token 2) predicts both branches: one row, two entries.
  EXPECT_EQ(b.head_row, (Ints{1, 2, 5}));
  EXPECT_EQ(b.row_begin, (Ints{0, 2, 3, 4}));
  EXPECT_EQ(b.target, (Ints{3, 5, 4, 7}));
  EXPECT_EQ(b.entry_node, (Ints{2, 4, 3, 6}));
  EXPECT_EQ(b.ref_begin, (Ints{0, 1, 2, 3, 4}));
  check_packing(s, f, bins, 16);
}

TEST(PackedBatch, FirstFitDecreasing) {
  // Six chains of sizes 3 5 2 4 1 3, each its own tree; bins of 6.
  const Ints sizes = {3, 5, 2, 4, 1, 3};
  std::vector<Sample> s;
  for (int32_t t = 0; t < 6; ++t) {
    Sample x;
    for (int32_t p = 0; p < sizes[t]; ++p) {
      x.tokens.push_back(10 * t + p);
      x.trainable.push_back(p > 0);
    }
    s.push_back(x);
  }
  const PrefixForest f = build_prefix_forest(s, true);
  const auto bins = pack_forest(f, 6);
  // Sorted: 5(t1) 4(t3) 3(t0) 3(t5) 2(t2) 1(t4).
  ASSERT_EQ(bins.size(), 3u);
  EXPECT_EQ(bins[0].token, (Ints{10, 11, 12, 13, 14, 40}));
  EXPECT_EQ(bins[1].token, (Ints{30, 31, 32, 33, 20, 21}));
  EXPECT_EQ(bins[2].token, (Ints{0, 1, 2, 50, 51, 52}));
  EXPECT_EQ(bins[1].subtree_end, (Ints{4, 4, 4, 4, 6, 6}));
  EXPECT_EQ(bins[1].position, (Ints{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(bins[1].head_row, (Ints{0, 1, 2, 4}));
  EXPECT_EQ(bins[1].target, (Ints{31, 32, 33, 21}));
  check_packing(s, f, bins, 6);
}

TEST(PackedBatch, EqualSizesKeepTreeOrder) {
  // 40 trees of 3 tokens (many enough that an unstable sort would shuffle them).
  std::vector<Sample> s;
  for (int32_t t = 0; t < 40; ++t) s.push_back(make({100 + t, 1, 2}, {0, 1, 1}));
  const auto bins = pack_forest(build_prefix_forest(s, true), 6);
  ASSERT_EQ(bins.size(), 20u);
  for (int32_t b = 0; b < 20; ++b)
    EXPECT_EQ(bins[b].token, (Ints{100 + 2 * b, 1, 2, 101 + 2 * b, 1, 2})) << "bin " << b;
}

TEST(PackedBatch, SplitGroupsChildrenUpToTheBinSize) {
  // Path 1 2 3 with answers of 2, 3 and 4 tokens, bins of 8: the first two
  // answers fill a bin exactly (3 + 2 + 3), the third goes with a copy of the path.
  const std::vector<Sample> s = {make({1, 2, 3, 10, 11}, {0, 0, 0, 1, 1}),
                                 make({1, 2, 3, 20, 21, 22}, {0, 0, 0, 1, 1, 1}),
                                 make({1, 2, 3, 30, 31, 32, 33}, {0, 0, 0, 1, 1, 1, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  const auto bins = pack_forest(f, 8);
  ASSERT_EQ(bins.size(), 2u);
  EXPECT_EQ(bins[0].token, (Ints{1, 2, 3, 10, 11, 20, 21, 22}));
  EXPECT_EQ(bins[0].subtree_end, (Ints{8, 8, 8, 5, 5, 8, 8, 8}));
  EXPECT_EQ(bins[0].head_row, (Ints{2, 3, 5, 6}));
  EXPECT_EQ(bins[0].row_begin, (Ints{0, 2, 3, 4, 5}));
  EXPECT_EQ(bins[0].target, (Ints{10, 20, 11, 21, 22}));
  EXPECT_EQ(bins[1].token, (Ints{1, 2, 3, 30, 31, 32, 33}));
  check_packing(s, f, bins, 8);
}

TEST(PackedBatch, LargeTreeSplitsAtTheBranchPoint) {
  // Prompt 1 2 3 (2 and 3 trainable in sample 0) with three 4-token answers:
  // 15 tokens, bins of 8 hold the 3-token path plus one answer each.
  const std::vector<Sample> s = {make({1, 2, 3, 10, 11, 12, 13}, {0, 1, 1, 0, 1, 1, 1}),
                                 make({1, 2, 3, 20, 21, 22, 23}, {0, 0, 0, 1, 1, 1, 1}),
                                 make({1, 2, 3, 30, 31, 32, 33}, {0, 0, 1, 1, 1, 1, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  ASSERT_EQ(f.size(), 15);
  const auto bins = pack_forest(f, 8);
  ASSERT_EQ(bins.size(), 3u);
  for (int b = 0; b < 3; ++b) {
    const int32_t a = 10 * (b + 1);
    EXPECT_EQ(bins[b].token, (Ints{1, 2, 3, a, a + 1, a + 2, a + 3}));
    EXPECT_EQ(bins[b].position, (Ints{0, 1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(bins[b].subtree_end, (Ints{7, 7, 7, 7, 7, 7, 7}));
  }
  // The path's entries (tokens 2 and 3) live in the first part only.
  EXPECT_EQ(bins[0].head_row, (Ints{0, 1, 3, 4, 5}));
  EXPECT_EQ(bins[0].target, (Ints{2, 3, 11, 12, 13}));
  EXPECT_EQ(entry_refs(bins[0], 1), (Refs{{0, 2}, {2, 2}}));
  EXPECT_EQ(bins[1].head_row, (Ints{2, 3, 4, 5}));
  EXPECT_EQ(bins[2].target, (Ints{30, 31, 32, 33}));
  check_packing(s, f, bins, 8);
}

TEST(PackedBatch, NestedSplitRecursesIntoOversizedChildren) {
  // Tree 1 2 {3 {4, 5}, 6}: the child 3 does not fit next to path [1 2] in
  // bins of 4, so it is split again below 3.
  const std::vector<Sample> s = {make({1, 2, 3, 4}, {0, 1, 1, 1}), make({1, 2, 3, 5}, {0, 0, 1, 1}),
                                 make({1, 2, 6}, {0, 1, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  ASSERT_EQ(f.token, (Ints{1, 2, 3, 4, 5, 6}));
  const auto bins = pack_forest(f, 4);
  ASSERT_EQ(bins.size(), 3u);
  EXPECT_EQ(bins[0].token, (Ints{1, 2, 3, 4}));
  EXPECT_EQ(bins[1].token, (Ints{1, 2, 3, 5}));
  EXPECT_EQ(bins[2].token, (Ints{1, 2, 6}));
  // Parts in creation order: [1 2|6] owns 2, [1 2 3|4] owns 3, [1 2 3|5].
  EXPECT_EQ(bins[2].entry_node, (Ints{1, 5}));
  EXPECT_EQ(bins[0].entry_node, (Ints{2, 3}));
  EXPECT_EQ(bins[0].head_row, (Ints{1, 2}));
  EXPECT_EQ(bins[1].entry_node, (Ints{4}));
  EXPECT_EQ(bins[1].head_row, (Ints{2}));
  check_packing(s, f, bins, 4);
}

TEST(PackedBatch, ChainLongerThanABinIsAnInputError) {
  const std::vector<Sample> s = {make({1, 2, 3}, {0, 1, 1}), make({4, 5, 6, 7, 8, 9, 1, 2, 3, 4},
                                                                  {0, 1, 1, 1, 1, 1, 1, 1, 1, 1})};
  const PrefixForest f = build_prefix_forest(s, true);
  expect_input_error([&] { pack_forest(f, 6); },
                     "max_tokens (6) is smaller than the longest sample (10 tokens)");
  expect_input_error([&] { pack_forest(f, 0); }, "max_tokens must be positive");
  check_packing(s, f, pack_forest(f, 10), 10);
}

TEST(PackedBatch, LinearBaselinePacksEverySample) {
  const std::vector<Sample> s = {make({1, 2, 3}, {0, 1, 1}), make({1, 2, 3, 4}, {0, 0, 1, 1}),
                                 make({1, 2}, {0, 1})};
  const PrefixForest f = build_prefix_forest(s, false);
  const auto bins = pack_forest(f, 5);
  ASSERT_EQ(bins.size(), 2u);
  EXPECT_EQ(bins[0].token, (Ints{1, 2, 3, 4}));
  EXPECT_EQ(bins[1].token, (Ints{1, 2, 3, 1, 2}));
  check_packing(s, f, bins, 5);
}

TEST(PackedBatch, EmptyForestHasNoBins) {
  EXPECT_TRUE(pack_forest(build_prefix_forest({}, true), 8).empty());
}

// Random multi-turn groups over a small alphabet and random bin sizes: all
// invariants hold, and a bin size that fits every tree never splits one.
TEST(PackedBatch, RandomBatchesKeepAllInvariants) {
  std::mt19937 rng(99);
  int splits = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<Sample> s;
    const int groups = 1 + static_cast<int>(rng() % 3);
    for (int g = 0; g < groups; ++g) {
      Sample prompt;
      const size_t plen = 1 + rng() % 4;
      for (size_t p = 0; p < plen; ++p) prompt.tokens.push_back(static_cast<int32_t>(rng() % 3));
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int k = 0; k < n; ++k) {
        Sample x;
        x.tokens = prompt.tokens;
        if (k > 0 && rng() % 2) {  // a later turn of an earlier sample of the group
          const Sample& base = s[s.size() - 1 - rng() % k];
          x.tokens = base.tokens;
        }
        const size_t extra = rng() % 7;
        for (size_t e = 0; e < extra; ++e) x.tokens.push_back(static_cast<int32_t>(rng() % 3));
        x.trainable.resize(x.tokens.size());
        for (size_t p = 1; p < x.tokens.size(); ++p) x.trainable[p] = rng() % 3 != 0;
        s.push_back(std::move(x));
      }
    }
    const PrefixForest f = build_prefix_forest(s, true);
    int32_t longest = 0, biggest_tree = 0;
    for (const Sample& x : s) longest = std::max(longest, static_cast<int32_t>(x.tokens.size()));
    for (int32_t r = 0; r < f.size(); r = f.subtree_end[r])
      biggest_tree = std::max(biggest_tree, f.subtree_end[r] - r);

    const int32_t max_tokens =
        std::max<int32_t>(1, longest - 2 + static_cast<int32_t>(rng() % (longest + 3)));
    SCOPED_TRACE("iter " + std::to_string(iter) + " max_tokens " + std::to_string(max_tokens));
    if (max_tokens < longest) {
      EXPECT_THROW(pack_forest(f, max_tokens), InputError);
      continue;
    }
    const auto bins = pack_forest(f, max_tokens);
    check_packing(s, f, bins, max_tokens);
    int64_t tokens = 0;
    for (const PackedBin& b : bins) tokens += b.tokens();
    if (max_tokens >= biggest_tree) {
      EXPECT_EQ(tokens, f.size());
    } else {
      EXPECT_GT(tokens, f.size());
      ++splits;
    }
    // Linear layout of the same batch.
    const PrefixForest lin = build_prefix_forest(s, false);
    check_packing(s, lin, pack_forest(lin, max_tokens), max_tokens);
  }
  EXPECT_GT(splits, 30);  // the split path is actually exercised
}

}  // namespace
}  // namespace forge
