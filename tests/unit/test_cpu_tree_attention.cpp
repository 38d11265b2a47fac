// The CPU tree attention (forward and backward) against dense masked softmax
// attention in double precision, on bins of many short turns branching off
// shared prefixes, as the learner's agent bins are: most 64 x 64 blocks are
// partly visible there, so the kernels pack the 8-key groups a query block
// sees and leave the others out (backend/cpu/tree_attention.cpp). Each case
// first checks that it exercises that: some computed block leaves a group
// out, and some key is seen by the first query of a block only (its subtree
// ends right after q0, the edge of the rule). Tolerance: |got - ref| <=
// 1e-4 max(1, |ref|) per element, far above FP32 rounding over these sums and
// far below the weight of one key left out (about 1 / its row's visible keys).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "emulation/backend_cases.hpp"

namespace forge {
namespace {

namespace bc = backend_cases;

struct Dense {
  std::vector<double> out, lse, dqkv;
};

bool visible(const std::vector<int32_t>& se, int i, int j) { return j <= i && i < se[j]; }

// Dense masked attention and its gradients, per query head (GQA: head h reads
// kv head h / (H / Hkv)), in the layout of bc::run_tree_attention.
Dense dense_attention(const bc::AttentionShape& sh, const bc::AttentionCase& c) {
  const std::vector<int32_t>& se = c.bin.subtree_end;
  const int T = c.bin.tokens(), H = sh.n_heads, Hkv = sh.n_kv_heads, D = sh.head_dim;
  const int HD = H * D, ld = (H + 2 * Hkv) * D, group = H / Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto q = [&](int t, int h, int d) { return static_cast<double>(c.qkv[size_t(t) * ld + h * D + d]); };
  const auto k = [&](int t, int g, int d) { return static_cast<double>(c.qkv[size_t(t) * ld + HD + g * D + d]); };
  const auto v = [&](int t, int g, int d) {
    return static_cast<double>(c.qkv[size_t(t) * ld + HD + Hkv * D + g * D + d]);
  };
  Dense r;
  r.out.assign(size_t(T) * HD, 0.0);
  r.lse.assign(size_t(H) * T, 0.0);
  r.dqkv.assign(size_t(T) * ld, 0.0);
  std::vector<double> p(T), dp(T);
  for (int h = 0; h < H; ++h) {
    const int g = h / group;
    for (int i = 0; i < T; ++i) {
      double mx = -1e300;
      for (int j = 0; j <= i; ++j) {
        if (!visible(se, i, j)) continue;
        double s = 0;
        for (int d = 0; d < D; ++d) s += q(i, h, d) * k(j, g, d);
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double l = 0;
      for (int j = 0; j <= i; ++j)
        if (visible(se, i, j)) l += std::exp(p[j] - mx);
      r.lse[size_t(h) * T + i] = mx + std::log(l);
      double delta = 0;
      for (int j = 0; j <= i; ++j) {
        if (!visible(se, i, j)) continue;
        p[j] = std::exp(p[j] - mx) / l;
        dp[j] = 0;
        for (int d = 0; d < D; ++d) {
          r.out[size_t(i) * HD + h * D + d] += p[j] * v(j, g, d);
          dp[j] += static_cast<double>(c.dout[size_t(i) * HD + h * D + d]) * v(j, g, d);
        }
        delta += p[j] * dp[j];
      }
      for (int j = 0; j <= i; ++j) {
        if (!visible(se, i, j)) continue;
        const double ds = p[j] * (dp[j] - delta);
        for (int d = 0; d < D; ++d) {
          r.dqkv[size_t(i) * ld + h * D + d] += scale * ds * k(j, g, d);
          r.dqkv[size_t(j) * ld + HD + g * D + d] += scale * ds * q(i, h, d);
          r.dqkv[size_t(j) * ld + HD + Hkv * D + g * D + d] +=
              p[j] * static_cast<double>(c.dout[size_t(i) * HD + h * D + d]);
        }
      }
    }
  }
  return r;
}

// Over the 64 x 64 blocks the kernels compute (some key visible to some
// query): does one leave an 8-key group out, and is a key seen by the block's
// first query only?
// Does a block see all its keys from every query (the kernels' unmasked
// path: keys [k0, k0 + 64) all ancestors of queries [q0, q1))?
struct Coverage {
  bool group_left_out = false, edge_key = false, fully_visible = false;
};

Coverage coverage(const std::vector<int32_t>& se) {
  const int T = static_cast<int>(se.size()), B = 64;
  Coverage cov;
  for (int q0 = 0; q0 < T; q0 += B) {
    const int q1 = std::min(T, q0 + B);
    for (int k0 = 0; k0 < q1; k0 += B) {
      const int k1 = std::min(T, k0 + B);
      bool any = false, out = false, all = k1 - k0 == B && k1 <= q0;
      for (int j = k0; j < k1 && all; ++j) all = se[j] >= q1;
      cov.fully_visible = cov.fully_visible || all;
      for (int j0 = k0; j0 < k1; j0 += 8) {
        bool seen = false;
        for (int j = j0; j < std::min(k1, j0 + 8); ++j) {
          seen = seen || (j < q1 && se[j] > q0);
          cov.edge_key = cov.edge_key || (j < q0 && se[j] == q0 + 1);
        }
        any = any || seen;
        out = out || !seen;
      }
      cov.group_left_out = cov.group_left_out || (any && out);
    }
  }
  return cov;
}

void expect_near_dense(const std::vector<float>& got, const std::vector<double>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - ref[i]), 1e-4 * std::max(1.0, std::fabs(ref[i])))
        << what << " element " << i << ": " << got[i] << " against " << ref[i];
}

TEST(CpuTreeAttention, PackedKeyGroupsMatchDenseMaskedSoftmax) {
  const auto cpu = make_backend("cpu");
  // Head dims: 32 (a compiled width, the agent policy's) and 24 (the generic path).
  for (const bc::AttentionShape sh : {bc::AttentionShape{4, 2, 32, 70, 40}, bc::AttentionShape{2, 1, 24, 70, 40}}) {
    int checked = 0;
    for (uint64_t seed = 1; seed < 40 && checked < 2; ++seed) {
      const bc::AttentionCase c = bc::attention_case(sh, seed);
      const Coverage cov = coverage(c.bin.subtree_end);
      if (!cov.group_left_out || !cov.edge_key) continue;  // not the case this test is for
      const std::string label = bc::attention_label(sh, c) + " seed " + std::to_string(seed);
      const bc::AttentionResult got = bc::run_tree_attention(*cpu, sh, c);
      const Dense ref = dense_attention(sh, c);
      expect_near_dense(got.out, ref.out, "out" + label);
      expect_near_dense(got.lse, ref.lse, "lse" + label);
      expect_near_dense(got.dqkv, ref.dqkv, "dq|dk|dv" + label);
      ++checked;
    }
    EXPECT_EQ(checked, 2) << "too few seeds give bins with partly visible blocks and edge keys (D "
                          << sh.head_dim << ")";
  }
}

// Blocks whose every query sees every key take the kernels' unmasked path:
// bins two branches deep past 64 tokens (bc::edge_case at tiles 64 and 128),
// at the compiled head dims and the generic path.
TEST(CpuTreeAttention, FullyVisibleBlocksMatchDenseMaskedSoftmax) {
  const auto cpu = make_backend("cpu");
  for (const bc::AttentionShape sh : {bc::AttentionShape{4, 2, 32, 0, 0}, bc::AttentionShape{2, 1, 64, 0, 0},
                                      bc::AttentionShape{2, 1, 128, 0, 0}, bc::AttentionShape{2, 1, 24, 0, 0}}) {
    bool fully_visible = false;
    for (int tile : {64, 128})
      for (int delta : {-1, 0, 1}) {
        const bc::AttentionCase c = bc::edge_case(sh, tile, delta, 40 + tile + delta);
        fully_visible = fully_visible || coverage(c.bin.subtree_end).fully_visible;
        const std::string label = " D " + std::to_string(sh.head_dim) + " tile " + std::to_string(tile) +
                                  " delta " + std::to_string(delta);
        const bc::AttentionResult got = bc::run_tree_attention(*cpu, sh, c);
        const Dense ref = dense_attention(sh, c);
        expect_near_dense(got.out, ref.out, "out" + label);
        expect_near_dense(got.lse, ref.lse, "lse" + label);
        expect_near_dense(got.dqkv, ref.dqkv, "dq|dk|dv" + label);
      }
    EXPECT_TRUE(fully_visible) << "no bin had a fully visible block (D " << sh.head_dim << ")";
  }
}

// Called from inside a parallel region (nested regions off), the kernels'
// own regions get one thread while omp_get_max_threads() still says the
// outer team's size: the backward must sum the dQ parts its region wrote,
// no more (unwritten parts would add stale memory), and give what a call
// from outside gives, bit for bit (its results depend on its team's size:
// each key block's thread).
TEST(CpuTreeAttention, CalledInsideAParallelRegion) {
  const auto cpu = make_backend("cpu");
  const bc::AttentionShape sh{4, 2, 32, 70, 40};
  const bc::AttentionCase c = bc::attention_case(sh, 3);
  // first a 2-thread call on this thread: its scratch (kept per calling
  // thread) then holds a second dQ part that the calls inside must not add
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(2);
  bc::run_tree_attention(*cpu, sh, c);
  const int saved_levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);
  const int threads = 2;
  std::vector<bc::AttentionResult> inside(threads);
#pragma omp parallel num_threads(threads)
  inside[omp_get_thread_num()] = bc::run_tree_attention(*cpu, sh, c);
  omp_set_max_active_levels(saved_levels);
  // outside, with one thread: the inside calls' team
  omp_set_num_threads(1);
  const bc::AttentionResult alone = bc::run_tree_attention(*cpu, sh, c);
  omp_set_num_threads(saved_threads);
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(inside[t].out, alone.out) << "thread " << t;
    EXPECT_EQ(inside[t].lse, alone.lse) << "thread " << t;
    EXPECT_EQ(inside[t].dqkv, alone.dqkv) << "thread " << t;
  }
}

// The scratch a call keeps for its thread (packed K/V, the backward's
// copies and dQ parts) is freed by release_scratch(), which
// PolicyModel::release_activations calls before a generation phase (it
// stayed held: a review measured 104 MB at T 8192, d 512); calls after it
// grow it again and give the same results.
TEST(CpuTreeAttention, ReleaseScratchFreesTheCallersBuffers) {
  const auto cpu = make_backend("cpu");
  const bc::AttentionShape sh{4, 2, 32, 30, 40};
  const bc::AttentionCase c = bc::attention_case(sh, 5);
  // at least the backward's scaled queries and dO: 2 H T D floats
  bc::expect_release_scratch_frees(*cpu, sh, c, 2 * size_t{4} * c.bin.token.size() * 32 * sizeof(float));
}

// bf16 q|k|v kept by the caller (TreeAttentionArgs::qkv_bf16) belong to
// backends with bf16 activations: the CPU backend refuses them, it does not
// silently leave them unwritten.
TEST(CpuTreeAttention, RefusesKeptBf16Qkv) {
  const auto cpu = make_backend("cpu");
  const bc::AttentionShape sh{2, 1, 16, 4, 10};
  const bc::AttentionCase c = bc::attention_case(sh, 3);
  const int T = c.bin.tokens(), ld = (sh.n_heads + 2 * sh.n_kv_heads) * sh.head_dim;
  std::vector<float> out(size_t(T) * sh.n_heads * sh.head_dim), lse(size_t(sh.n_heads) * T);
  std::vector<float> dq(c.qkv.size());
  std::vector<uint16_t> kept(c.qkv.size());
  TreeAttentionArgs a = fused_tree_attention_args(T, sh.n_heads, sh.n_kv_heads, sh.head_dim, c.qkv.data(), ld,
                                                  c.bin.subtree_end.data(), out.data(), lse.data());
  a.qkv_bf16 = kept.data();
  EXPECT_THROW(cpu->tree_attention_fwd(a), Error);
  EXPECT_THROW(cpu->tree_attention_bwd(a, fused_tree_attention_grads(sh.n_heads, sh.n_kv_heads, sh.head_dim,
                                                                     c.dout.data(), dq.data())),
               Error);
}

}  // namespace
}  // namespace forge
