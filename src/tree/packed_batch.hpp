// Packing a prefix forest into bins of at most max_tokens tokens, the unit of
// one forward/backward pass.
//
// Trees go into bins first-fit decreasing by size. A tree larger than a bin is
// split at branch points: each part repeats the path from the root to the
// branch point (its nodes are context there: their loss entries and
// references stay with the first part that holds them, so every weight is
// counted once) followed by whole child subtrees, recursively. A single
// chain longer than max_tokens cannot be split and is an InputError.
//
// In a bin, indices are local: subtree_end and the loss rows refer to the
// bin's own tokens. Loss entries are grouped by row (ascending), so a branch
// point's row is computed once for all its trainable children.
#pragma once
#include <cstdint>
#include <vector>

#include "tree/prefix_tree.hpp"

namespace forge {

struct PackedBin {
  std::vector<int32_t> token;        // [T]
  std::vector<int32_t> position;     // [T] RoPE position (depth)
  std::vector<int32_t> subtree_end;  // [T], local
  // Head rows: unique parents of trainable nodes, ascending local indices.
  std::vector<int32_t> head_row;     // [R]
  std::vector<int32_t> row_begin;    // [R + 1] entries of head row r
  std::vector<int32_t> target;       // [E] token predicted by entry e
  std::vector<int32_t> entry_node;   // [E] node index in the source forest
  // references of entry e: refs[ref_begin[e] .. ref_begin[e+1])
  std::vector<int32_t> ref_begin;    // [E + 1]
  std::vector<SampleRef> refs;

  int32_t tokens() const { return static_cast<int32_t>(token.size()); }
  int32_t rows() const { return static_cast<int32_t>(head_row.size()); }
  int32_t entries() const { return static_cast<int32_t>(target.size()); }
};

std::vector<PackedBin> pack_forest(const PrefixForest& forest, int32_t max_tokens);

}  // namespace forge
