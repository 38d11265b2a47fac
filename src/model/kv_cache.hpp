// The paged KV cache of the rollout engine: storage, block allocation and the
// session prefix store.
//
// Storage. One backend allocation holds, per layer, a K pool and a V pool of
// num_blocks * block_size slots, one row of n_kv_heads * head_dim values per
// slot (Backend::kv_cache_value_bytes() each: FP32, or bf16 in the CUDA
// backend's bf16 mode): [layer][k | v][slot][n_kv_heads * head_dim], each pool
// starting on 16 bytes. Slot = block * block_size
// + offset; a sequence's block table lists its blocks in position order, so
// its position p lives in slot table[p / block_size] * block_size
// + p % block_size (the layout Backend::kv_cache_write and
// Backend::paged_attention_fwd read).
//
// Ownership. Every block is in exactly one place: the free list, the block
// table of one running sequence (no sharing), or one session entry.
//
// Sessions. A session entry keeps the blocks of a finished sequence together
// with the tokens whose k/v they hold, under a key (e.g. the episode). There
// is one entry per key: storing under a key releases the older entry. Entries
// are kept in LRU order; allocate() evicts whole entries, least recently
// stored first, when the free list is short. take_session() hands an entry's
// blocks to a new sequence, which owns them from then on.
//
// Copies. copy_positions() copies the k/v of positions [from, to) from one
// block table to another in every layer (the rows of a position are at the
// same offset in its block on both sides): how a sequence takes a prefix it
// shares with another without sharing blocks.
#pragma once
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/device_array.hpp"
#include "model/model_config.hpp"

namespace forge {

class PagedKvCache {
 public:
  struct Prefix {
    std::vector<int32_t> tokens;  // tokens whose k/v are in the blocks, positions 0..
    std::vector<int32_t> blocks;  // ceil(tokens / block_size) or more
    int version = 0;              // the engine's policy version when they were stored
  };

  // Pool of floor(capacity_tokens / block_size) blocks; InputError if that is 0.
  PagedKvCache(Backend& backend, const ModelConfig& config, int64_t capacity_tokens,
               int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int64_t capacity_tokens() const { return static_cast<int64_t>(num_blocks_) * block_size_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int cached_blocks() const { return cached_blocks_; }  // held by session entries
  size_t sessions() const { return lru_.size(); }
  int64_t evictions() const { return evictions_; }

  void* k(int layer) { return pool_.data() + (2 * static_cast<size_t>(layer)) * layer_words_; }
  void* v(int layer) { return pool_.data() + (2 * static_cast<size_t>(layer) + 1) * layer_words_; }
  size_t bytes() const { return pool_.size() * sizeof(float); }

  // n blocks from the free list, evicting LRU session entries as needed.
  // Error when free_blocks() + cached_blocks() < n (callers check first).
  std::vector<int32_t> allocate(int n);
  void release(const std::vector<int32_t>& blocks);

  const Prefix* find_session(const std::string& key) const;  // nullptr if absent
  Prefix take_session(const std::string& key);                // empty if absent
  void store_session(const std::string& key, Prefix prefix);  // most recent
  void clear_sessions();
  template <class F>
  void for_each_session(F&& f) const {  // f(const Prefix&), most recent first
    for (const Entry& e : lru_) f(e.second);
  }

  void copy_positions(const std::vector<int32_t>& src_blocks, const std::vector<int32_t>& dst_blocks, int from,
                      int to);

 private:
  void evict_oldest();

  Backend& backend_;
  int block_size_ = 0, num_blocks_ = 0, layers_ = 0;
  size_t row_bytes_ = 0;    // one position's k (or v) row
  size_t layer_words_ = 0;  // one K (or V) pool in 4-byte words (a multiple of 4: 16-byte starts)
  DeviceArray<float> pool_;  // storage; values of the backend's cache type
  std::vector<int32_t> free_;
  std::vector<uint8_t> in_use_;  // per block: not on the free list
  using Entry = std::pair<std::string, Prefix>;
  std::list<Entry> lru_;  // front = most recent
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int cached_blocks_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace forge
