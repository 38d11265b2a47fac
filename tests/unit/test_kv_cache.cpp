// The rollout engine's paged KV cache (model/kv_cache.hpp) on its own (the
// engine's tests reach it only through generation): the pool's size and
// refusals, block ownership (every block on the free list, in one table or
// in one session entry: allocate, release, a double release refused),
// session entries (one per key, LRU eviction of whole entries when the free
// list is short, take_session handing the blocks over), and copy_positions
// (the k/v rows of [from, to) copied between tables whose blocks differ,
// across block boundaries, every layer, nothing else touched).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "model/kv_cache.hpp"

namespace forge {
namespace {

ModelConfig config() {
  ModelConfig c;
  c.vocab = 16;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // head_dim 4: a row of 8 floats
  c.ffn_dim = 32;
  return c;
}

// Every block is free, in `held` or in a session entry, and nowhere twice.
void expect_each_block_once(const PagedKvCache& cache, const std::vector<std::vector<int32_t>>& held) {
  std::multiset<int32_t> seen;
  for (const auto& table : held) seen.insert(table.begin(), table.end());
  cache.for_each_session([&](const PagedKvCache::Prefix& p) { seen.insert(p.blocks.begin(), p.blocks.end()); });
  for (int32_t b : seen) EXPECT_EQ(seen.count(b), 1u) << "block " << b;
  EXPECT_EQ(static_cast<int>(seen.size()) + cache.free_blocks(), cache.num_blocks());
}

TEST(PagedKvCache, SizeAndRefusals) {
  auto backend = make_backend("cpu");
  const PagedKvCache cache(*backend, config(), 100, 16);
  EXPECT_EQ(cache.num_blocks(), 6);  // floor(100 / 16)
  EXPECT_EQ(cache.capacity_tokens(), 96);
  EXPECT_EQ(cache.free_blocks(), 6);
  EXPECT_THROW(PagedKvCache(*backend, config(), 15, 16), InputError);
  EXPECT_THROW(PagedKvCache(*backend, config(), 100, 0), InputError);
  EXPECT_THROW(PagedKvCache(*backend, config(), int64_t{1} << 40, 16), InputError);  // past 2^31 slots
}

TEST(PagedKvCache, BlocksAndSessionsOwnEachBlockOnce) {
  auto backend = make_backend("cpu");
  PagedKvCache cache(*backend, config(), 8 * 4, 4);  // 8 blocks
  std::vector<int32_t> a = cache.allocate(3), b = cache.allocate(2);
  EXPECT_EQ(cache.free_blocks(), 3);
  expect_each_block_once(cache, {a, b});
  cache.release(b);
  EXPECT_THROW(cache.release(b), Error);  // already free
  EXPECT_EQ(cache.free_blocks(), 5);

  // A session entry per key; storing again under the key releases the older.
  cache.store_session("x", {{1, 2, 3}, a, 7});
  EXPECT_EQ(cache.cached_blocks(), 3);
  const std::vector<int32_t> c = cache.allocate(2);
  cache.store_session("y", {{4, 5}, c, 8});
  EXPECT_EQ(cache.sessions(), 2u);
  ASSERT_NE(cache.find_session("x"), nullptr);
  EXPECT_EQ(cache.find_session("x")->version, 7);
  const std::vector<int32_t> d = cache.allocate(1);
  cache.store_session("x", {{9}, d, 9});  // replaces x: its 3 blocks go back
  EXPECT_EQ(cache.cached_blocks(), 3);
  EXPECT_EQ(cache.free_blocks(), 5);
  expect_each_block_once(cache, {});

  // Short of free blocks: whole entries go, least recently stored first (y).
  const std::vector<int32_t> e = cache.allocate(6);
  EXPECT_EQ(cache.evictions(), 1);
  EXPECT_EQ(cache.find_session("y"), nullptr);
  ASSERT_NE(cache.find_session("x"), nullptr);
  expect_each_block_once(cache, {e});
  EXPECT_THROW(cache.allocate(3), Error);  // 1 free + 1 cached
  // take_session hands the blocks over: the caller owns them.
  const PagedKvCache::Prefix x = cache.take_session("x");
  EXPECT_EQ(x.tokens, std::vector<int32_t>{9});
  EXPECT_EQ(x.blocks, d);
  EXPECT_EQ(cache.cached_blocks(), 0);
  EXPECT_TRUE(cache.take_session("x").blocks.empty());
  expect_each_block_once(cache, {e, x.blocks});
  cache.release(x.blocks);
  cache.release(e);
  cache.store_session("z", {{1}, cache.allocate(2), 1});
  cache.clear_sessions();
  EXPECT_EQ(cache.free_blocks(), cache.num_blocks());
  EXPECT_EQ(cache.sessions(), 0u);
}

TEST(PagedKvCache, CopyPositionsMovesExactlyTheRowsAsked) {
  auto backend = make_backend("cpu");
  const ModelConfig c = config();
  const int bs = 4, row = c.n_kv_heads * c.head_dim();
  PagedKvCache cache(*backend, c, 8 * bs, bs);
  const std::vector<int32_t> src = cache.allocate(3), dst = {cache.allocate(1)[0], cache.allocate(1)[0],
                                                             cache.allocate(1)[0]};
  ASSERT_NE(src, dst);
  // Every value of both pools tells its layer, pool, slot and lane.
  const size_t pool_floats = static_cast<size_t>(cache.num_blocks()) * bs * row;
  const auto value = [&](int layer, int kv, size_t i) { return static_cast<float>(layer * 1e6 + kv * 5e5 + i); };
  for (int layer = 0; layer < c.n_layers; ++layer)
    for (int kv = 0; kv < 2; ++kv) {
      float* pool = static_cast<float*>(kv ? cache.v(layer) : cache.k(layer));
      for (size_t i = 0; i < pool_floats; ++i) pool[i] = value(layer, kv, i);
    }
  const int from = 3, to = 10;  // the end of block 0, all of block 1, half of block 2
  cache.copy_positions(src, dst, from, to);
  const auto slot = [&](const std::vector<int32_t>& table, int p) { return static_cast<size_t>(table[p / bs]) * bs + p % bs; };
  std::set<size_t> written;
  for (int p = from; p < to; ++p) written.insert(slot(dst, p));
  for (int layer = 0; layer < c.n_layers; ++layer)
    for (int kv = 0; kv < 2; ++kv) {
      const float* pool = static_cast<const float*>(kv ? cache.v(layer) : cache.k(layer));
      for (int p = from; p < to; ++p)
        for (int i = 0; i < row; ++i)
          ASSERT_EQ(pool[slot(dst, p) * row + i], value(layer, kv, slot(src, p) * row + i))
              << "layer " << layer << (kv ? " v" : " k") << " position " << p;
      for (size_t s = 0; s < pool_floats / row; ++s) {
        if (written.count(s)) continue;
        for (int i = 0; i < row; ++i)
          ASSERT_EQ(pool[s * row + i], value(layer, kv, s * row + i)) << "slot " << s << " was touched";
      }
    }
  EXPECT_THROW(cache.copy_positions(src, dst, 0, 13), Error);  // past the tables' 3 blocks
  EXPECT_THROW(cache.copy_positions(src, dst, 5, 4), Error);
  cache.copy_positions(src, dst, 6, 6);  // nothing
}

}  // namespace
}  // namespace forge
