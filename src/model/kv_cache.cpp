#include "model/kv_cache.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace forge {

PagedKvCache::PagedKvCache(Backend& backend, const ModelConfig& config, int64_t capacity_tokens,
                           int block_size)
    : backend_(backend), block_size_(block_size), layers_(config.n_layers) {
  if (block_size < 1) throw InputError("rollout engine: block_size must be positive");
  const int64_t blocks = capacity_tokens / block_size;
  if (blocks < 1)
    throw InputError("rollout engine: kv_cache_tokens (" + std::to_string(capacity_tokens) +
                     ") holds no block of block_size (" + std::to_string(block_size) +
                     ") tokens");
  if (blocks > INT32_MAX / block_size)
    throw InputError("rollout engine: kv_cache_tokens (" + std::to_string(capacity_tokens) +
                     ") exceeds the 2^31 slots a block table can address");
  num_blocks_ = static_cast<int>(blocks);
  row_bytes_ = static_cast<size_t>(config.n_kv_heads) * config.head_dim() * backend.kv_cache_value_bytes();
  const size_t values = static_cast<size_t>(blocks) * block_size * config.n_kv_heads * config.head_dim();
  layer_words_ = (values * backend.kv_cache_value_bytes() + 15) / 16 * 4;
  pool_.resize(backend, 2 * static_cast<size_t>(config.n_layers) * layer_words_);
  free_.reserve(num_blocks_);
  for (int b = num_blocks_ - 1; b >= 0; --b) free_.push_back(b);  // hands out 0, 1, ... first
  in_use_.assign(num_blocks_, 0);
}

std::vector<int32_t> PagedKvCache::allocate(int n) {
  FORGE_CHECK(n >= 0 && n <= free_blocks() + cached_blocks_,
              "allocate(" + std::to_string(n) + ") with " + std::to_string(free_blocks()) +
                  " free and " + std::to_string(cached_blocks_) + " cached blocks");
  while (free_blocks() < n) evict_oldest();
  std::vector<int32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  for (int32_t b : out) in_use_[b] = 1;
  return out;
}

void PagedKvCache::release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    FORGE_CHECK(b >= 0 && b < num_blocks_ && in_use_[b], "release of a free block");
    in_use_[b] = 0;
    free_.push_back(b);
  }
}

const PagedKvCache::Prefix* PagedKvCache::find_session(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &it->second->second;
}

PagedKvCache::Prefix PagedKvCache::take_session(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return {};
  Prefix p = std::move(it->second->second);
  cached_blocks_ -= static_cast<int>(p.blocks.size());
  lru_.erase(it->second);
  index_.erase(it);
  return p;
}

void PagedKvCache::store_session(const std::string& key, Prefix prefix) {
  release(take_session(key).blocks);
  cached_blocks_ += static_cast<int>(prefix.blocks.size());
  lru_.emplace_front(key, std::move(prefix));
  index_[key] = lru_.begin();
}

void PagedKvCache::clear_sessions() {
  while (!lru_.empty()) {
    const std::string key = lru_.back().first;
    release(take_session(key).blocks);
  }
}

void PagedKvCache::copy_positions(const std::vector<int32_t>& src_blocks, const std::vector<int32_t>& dst_blocks,
                                  int from, int to) {
  const int bs = block_size_;
  const auto covers = [&](const std::vector<int32_t>& table) {
    return to == from || static_cast<size_t>((to - 1) / bs) < table.size();
  };
  FORGE_CHECK(from >= 0 && from <= to && covers(src_blocks) && covers(dst_blocks),
              "copy of positions [" + std::to_string(from) + ", " + std::to_string(to) + ") past a block table");
  for (int layer = 0; layer < layers_; ++layer)
    for (void* pool : {k(layer), v(layer)}) {
      char* base = static_cast<char*>(pool);
      for (int p = from; p < to;) {  // a run of positions within one block
        const int block = p / bs, end = std::min(to, (block + 1) * bs);
        const size_t offset = static_cast<size_t>(p % bs) * row_bytes_;
        backend_.copy(base + static_cast<size_t>(dst_blocks[block]) * bs * row_bytes_ + offset,
                      base + static_cast<size_t>(src_blocks[block]) * bs * row_bytes_ + offset,
                      static_cast<size_t>(end - p) * row_bytes_);
        p = end;
      }
    }
}

void PagedKvCache::evict_oldest() {
  FORGE_CHECK(!lru_.empty(), "no session entry to evict");
  const std::string key = lru_.back().first;
  release(take_session(key).blocks);
  ++evictions_;
}

}  // namespace forge
