#include "tree/packed_batch.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace forge {
namespace {

// One unit of packing: path (root first, empty for a whole tree) followed by
// whole subtrees; the subtrees hang below the path's last node.
struct Part {
  std::vector<int32_t> path;
  int32_t owned_from = 0;  // path[owned_from..] carry their loss entries here
  std::vector<int32_t> subtrees;
  int32_t size = 0;
};

struct Entry {
  int32_t row;   // local index of the parent
  int32_t node;  // forest index of the trainable node
};

bool has_refs(const PrefixForest& f, int32_t n) { return f.ref_begin[n + 1] > f.ref_begin[n]; }

// Splits the tree under `root` at branch points. `owned` marks path nodes
// whose entries an earlier part already carries; since a part holds every
// ancestor of its nodes, the owned nodes of a path are always a prefix of it.
void split_tree(const PrefixForest& f, int32_t root, int32_t max_tokens,
                std::vector<uint8_t>& owned, std::vector<Part>& parts) {
  const std::vector<int32_t>& end = f.subtree_end;
  // Depth-first over nodes whose children are spread over parts: when n is
  // taken, `path` still starts with the path to parent(n).
  std::vector<int32_t> todo{root};
  std::vector<int32_t> path, big;
  while (!todo.empty()) {
    const int32_t n = todo.back();
    todo.pop_back();
    path.resize(f.depth[n]);
    path.push_back(n);
    const int32_t plen = static_cast<int32_t>(path.size());

    Part group;
    auto flush = [&] {
      if (group.subtrees.empty()) return;
      group.path = path;
      while (group.owned_from < plen && owned[path[group.owned_from]]) ++group.owned_from;
      for (int32_t k = group.owned_from; k < plen; ++k) owned[path[k]] = 1;
      group.size += plen;
      parts.push_back(std::move(group));
      group = Part{};
    };
    big.clear();
    for (int32_t c = n + 1; c < end[n]; c = end[c]) {
      const int32_t size = end[c] - c;
      if (plen + size > max_tokens) {
        big.push_back(c);
        continue;
      }
      if (plen + group.size + size > max_tokens) flush();
      group.subtrees.push_back(c);
      group.size += size;
    }
    flush();
    todo.insert(todo.end(), big.rbegin(), big.rend());
  }
}

// Appends a part's tokens to the bin and its loss entries to `entries`.
void append_part(const PrefixForest& f, const Part& part, PackedBin& bin,
                 std::vector<Entry>& entries) {
  const int32_t base = bin.tokens();
  const int32_t stop = base + part.size;
  auto add_entry = [&](int32_t row, int32_t node) {
    if (!has_refs(f, node)) return;
    if (row < 0) throw Error("prefix forest: root node " + std::to_string(node) + " is trainable");
    entries.push_back({row, node});
  };
  const int32_t plen = static_cast<int32_t>(part.path.size());
  for (int32_t k = 0; k < plen; ++k) {
    const int32_t x = part.path[k];
    bin.token.push_back(f.token[x]);
    bin.position.push_back(f.depth[x]);
    bin.subtree_end.push_back(stop);
    if (k >= part.owned_from) add_entry(k == 0 ? -1 : base + k - 1, x);
  }
  for (int32_t c : part.subtrees) {
    const int32_t shift = bin.tokens() - c;  // forest index + shift = local index
    for (int32_t x = c; x < f.subtree_end[c]; ++x) {
      bin.token.push_back(f.token[x]);
      bin.position.push_back(f.depth[x]);
      bin.subtree_end.push_back(f.subtree_end[x] + shift);
      // A subtree under no path is a whole tree: its root predicts nothing
      // (row -1 refuses it trainable; base - 1 was the previous part's token).
      add_entry(x == c ? (plen > 0 ? base + plen - 1 : -1) : f.parent[x] + shift, x);
    }
  }
}

// Fills head rows and entries of a bin from its unordered entry list: a
// counting sort by row keeps entries of one row in local node order.
void finish_bin(const PrefixForest& f, const std::vector<Entry>& entries, PackedBin& bin) {
  const int32_t T = bin.tokens();
  const int32_t E = static_cast<int32_t>(entries.size());
  std::vector<int32_t> first(T + 1, 0);
  for (const Entry& e : entries) ++first[e.row + 1];
  for (int32_t r = 0; r < T; ++r) {
    if (first[r + 1] > 0) {
      bin.head_row.push_back(r);
      bin.row_begin.push_back(first[r]);
    }
    first[r + 1] += first[r];
  }
  bin.row_begin.push_back(E);

  std::vector<int32_t> order(E);
  for (int32_t i = 0; i < E; ++i) order[first[entries[i].row]++] = i;
  bin.ref_begin.push_back(0);
  for (int32_t i : order) {
    const int32_t node = entries[i].node;
    bin.target.push_back(f.token[node]);
    bin.entry_node.push_back(node);
    bin.refs.insert(bin.refs.end(), f.refs.begin() + f.ref_begin[node],
                    f.refs.begin() + f.ref_begin[node + 1]);
    bin.ref_begin.push_back(static_cast<int32_t>(bin.refs.size()));
  }
}

}  // namespace

std::vector<PackedBin> pack_forest(const PrefixForest& forest, int32_t max_tokens) {
  if (max_tokens <= 0)
    throw InputError("max_tokens must be positive (got " + std::to_string(max_tokens) + ")");
  int32_t longest = 0;
  for (int32_t d : forest.depth) longest = std::max(longest, d + 1);
  if (longest > max_tokens)
    throw InputError("max_tokens (" + std::to_string(max_tokens) +
                     ") is smaller than the longest sample (" + std::to_string(longest) +
                     " tokens)");

  std::vector<Part> parts;
  std::vector<uint8_t> owned(forest.size(), 0);
  for (int32_t root = 0; root < forest.size(); root = forest.subtree_end[root]) {
    const int32_t size = forest.subtree_end[root] - root;
    if (size <= max_tokens)
      parts.push_back(Part{{}, 0, {root}, size});
    else
      split_tree(forest, root, max_tokens, owned, parts);
  }

  // First-fit decreasing; the stable sort keeps tree order among equal sizes.
  std::vector<int32_t> order(parts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return parts[a].size > parts[b].size; });
  std::vector<int32_t> room;
  std::vector<std::vector<int32_t>> bin_parts;
  for (int32_t p : order) {
    size_t b = 0;
    while (b < room.size() && room[b] < parts[p].size) ++b;
    if (b == room.size()) {
      room.push_back(max_tokens);
      bin_parts.emplace_back();
    }
    room[b] -= parts[p].size;
    bin_parts[b].push_back(p);
  }

  std::vector<PackedBin> bins(bin_parts.size());
  std::vector<Entry> entries;
  for (size_t b = 0; b < bins.size(); ++b) {
    entries.clear();
    for (int32_t p : bin_parts[b]) append_part(forest, parts[p], bins[b], entries);
    finish_bin(forest, entries, bins[b]);
  }
  return bins;
}

}  // namespace forge
