// Exact prefix-tree merging of samples (docs/architecture.md, "Prefix tree").
//
// A sample is one LLM call: its tokens (context then generated) and a
// per-token trainable flag (false for context). All samples of a batch are
// merged into a trie on their token sequences and serialized in DFS
// pre-order. Per node: token id, depth (the RoPE position), parent index and
// subtree_end (one past the last index of its subtree). Query i may attend to
// key j iff j <= i < subtree_end[j]: j is i itself or one of its ancestors.
//
// A trainable node c is predicted from the hidden state of parent(c): the
// loss entry (row = parent(c), target = token(c)). A node that is trainable
// in several samples carries one reference per such sample, so that a loss
// can give each (sample, position) its own coefficient and the sum over
// references makes the tree loss equal to the linear one. Position 0 of a
// sample has no context and is never trainable.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

namespace forge {

struct Sample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trainable;  // same length as tokens; 1 = generated (in the loss)
};

// One (sample, position) that made a node trainable.
struct SampleRef {
  int32_t sample = 0;    // index into the input samples
  int32_t position = 0;  // index into that sample's tokens
};

// A forest in DFS pre-order. Several roots may follow each other; a root's
// subtree_end closes its tree, so trees never see each other.
struct PrefixForest {
  std::vector<int32_t> token;
  std::vector<int32_t> depth;        // position in its sequence (0 for a root)
  std::vector<int32_t> parent;       // -1 for a root
  std::vector<int32_t> subtree_end;  // one past the last node of the subtree
  // refs of node n: refs[ref_begin[n] .. ref_begin[n+1]); empty = not trainable
  std::vector<int32_t> ref_begin;    // size() + 1
  std::vector<SampleRef> refs;

  int32_t size() const { return static_cast<int32_t>(token.size()); }
};

// Merges all samples into one trie per distinct first token (merge = true), or
// lays each sample out as its own chain (merge = false: the linear baseline).
// Throws InputError for an empty sample, a length mismatch or a trainable
// position 0, and for a forest of more than max_nodes nodes or trained
// tokens (int32 indices; a test lowers the bound).
inline constexpr int64_t kMaxForestNodes = std::numeric_limits<int32_t>::max() - 1;
PrefixForest build_prefix_forest(const std::vector<Sample>& samples, bool merge,
                                 int64_t max_nodes = kMaxForestNodes);

// Total tokens over the samples (the linear token count).
int64_t linear_token_count(const std::vector<Sample>& samples);

}  // namespace forge
