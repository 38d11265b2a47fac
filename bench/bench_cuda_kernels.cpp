// The CUDA backend's kernels and train step on a GPU, through the Backend
// interface (what the trainer calls). Per kernel: median time; attention
// GFLOP/s counts 4 D flops per visible (query, key) pair and head in the
// forward, 10 D in the backward (S, dP, dV, dK, dQ with S recomputed twice);
// memory-bound kernels report achieved GB/s from the bytes they must move.
// The policy loss: time of the operation including its copy of the sums.
// bf16 rows: the same operation on a second backend in bf16 precision
// (run.precision = bf16), conversion of the inputs to bf16 included. FP32
// attention: the backend's default (3xTF32 on tensor cores, or what
// FORGE_CUDA_FP32_ATTENTION says) and, on a third backend, the exact SIMT
// kernels ("exact" rows). "1 tile a step" rows: the tensor-core kernels
// with FORGE_CUDA_ATTENTION_STEP_TILES=1 (the default takes two 32-row tiles
// a step in the forward, dK/dV and dQ where the head-dim class has them);
// the JSON gives the time ratios [forward, backward] on the causal mask.
// "bf16 wgmma" rows: the bf16 forward and backward on wgmma
// (FORGE_CUDA_ATTENTION_WGMMA=1, compute capability 9.0; elsewhere the
// backend says so and they time the default kernels), "bf16 wgmma x2" rows
// with two warpgroups a block (=2); the JSON gives their
// time over the default's and their throughput as a fraction of
// FlashAttention's, [forward, backward], causal. "k128" rows: their
// forwards in steps of 128 keys (FORGE_CUDA_ATTENTION_WGMMA_KEYS=128); the
// JSON gives [x1, x2] of their time over the 64-key steps' and of flash's.
// Train step: the reference model on agent-like samples (shared prompt, turns),
// tree-merged versus linear, tokens/s and the speedup.
// Attention (H heads, Hkv kv heads, head dim D, T = --tokens) on a causal
// chain and on a tree bin of agent-like samples; where torch with CUDA runs
// ($FORGE_PYTHON, default /usr/bin/python3), bench/torch_sdpa.py times
// PyTorch's scaled_dot_product_attention on the same shapes and masks (bf16
// FlashAttention, cuDNN and memory-efficient; FP32 memory-efficient), its
// GFLOP/s counted over the same visible pairs; the JSON line gives forge's
// bf16 attention throughput as a fraction of FlashAttention's on the causal
// mask (forward, backward), and its FP32 attention's as a fraction of
// torch's FP32 memory-efficient kernel's.
// Where no device is present (or the build has no CUDA) it says so, prints
// the table header and the JSON line with "device": "none", and exits 0.
//
//   bench_cuda_kernels [--tokens=4096] [--reps=10] [--heads=32] [--kv_heads=8] [--dim=128]
//                      [--no-torch]
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "algo/policy_loss.hpp"
#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "backend/device_array.hpp"
#include "bench_util.hpp"
#include "bench_workloads.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/scoped_env.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

using namespace forge;

namespace {

void header() { std::printf("%-44s %12s %12s %12s\n", "kernel", "ms", "GFLOP/s", "GB/s"); }

void row(const char* name, double secs, double flops, double bytes) {
  std::printf("%-44s %12.3f %12.1f %12.1f\n", name, secs * 1e3, flops / secs / 1e9, bytes / secs / 1e9);
}

std::vector<float> randn(Rng& rng, size_t n, float s = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal()) * s;
  return v;
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int T = flags.get("tokens", 4096), reps = flags.get("reps", 10);
  const int H = flags.get("heads", 32), Hkv = flags.get("kv_heads", 8), D = flags.get("dim", 128);
  const bool with_torch = !flags.on("no-torch");
  flags.finish();
  if (H <= 0 || Hkv <= 0 || H % Hkv != 0 || D <= 0 || D > 128 || T <= 0 || reps <= 0)
    bench::Flags::usage("need tokens > 0, reps > 0, heads a multiple of kv_heads, 0 < dim <= 128; got tokens " +
                        std::to_string(T) + ", reps " + std::to_string(reps) + ", heads " + std::to_string(H) +
                        ", kv_heads " + std::to_string(Hkv) + ", dim " + std::to_string(D));
  // A --tokens too small for the agent tree bin is a usage error before any
  // output (the samples' lengths, which decide it, do not depend on the
  // random tokens): it came after the first rows were timed and printed.
  {
    Rng probe(1);
    bench::agent_tree_bin(probe, T, "--tokens");
  }

  std::unique_ptr<Backend> gpu;
  try {
    gpu = make_backend("cuda");
  } catch (const InputError& e) {
    std::printf("bench_cuda_kernels: backend cuda unavailable (%s); nothing timed\n", e.what());
    header();
    bench::print_json({{"device", "\"none\""}});
    return 0;
  }
  Backend& B = *gpu;
  const std::unique_ptr<Backend> gpu16 = make_backend("cuda", Precision::kBf16);
  Backend& B16 = *gpu16;  // works on B's buffers (same device), on its own stream
  // A backend made with these environment variables set (restored after).
  const auto backend_with = [](std::vector<std::pair<const char*, const char*>> vars, Precision precision) {
    std::vector<std::unique_ptr<ScopedEnv>> set;
    for (const auto& [name, value] : vars) set.push_back(std::make_unique<ScopedEnv>(name, value));
    std::unique_ptr<Backend> be = make_backend("cuda", precision);
    while (!set.empty()) set.pop_back();  // restored last set first
    return be;
  };
  const char* fp32_attention = std::getenv("FORGE_CUDA_FP32_ATTENTION");
  const std::string fp32_mode = fp32_attention ? fp32_attention : "3xtf32";
  const std::unique_ptr<Backend> gpu_exact = backend_with({{"FORGE_CUDA_FP32_ATTENTION", "exact"}}, Precision::kFp32);
  Backend& Bx = *gpu_exact;  // exact FP32 attention, B's buffers
  // The tensor-core attention in steps of one 32-row tile (the default is
  // two where the head-dim class has them): the A/B of the forward's,
  // dK/dV's and dQ's steps, in the same run
  const std::unique_ptr<Backend> gpu_one = backend_with({{"FORGE_CUDA_ATTENTION_STEP_TILES", "1"}}, Precision::kFp32);
  const std::unique_ptr<Backend> gpu16_one = backend_with({{"FORGE_CUDA_ATTENTION_STEP_TILES", "1"}}, Precision::kBf16);
  // the wgmma kernels with one and with two warpgroups a block, and their
  // forwards in steps of 128 keys
  const std::unique_ptr<Backend> gpu16_wgmma[2] = {
      backend_with({{"FORGE_CUDA_ATTENTION_WGMMA", "1"}}, Precision::kBf16),
      backend_with({{"FORGE_CUDA_ATTENTION_WGMMA", "2"}}, Precision::kBf16)};
  const std::unique_ptr<Backend> gpu16_wgmma128[2] = {
      backend_with({{"FORGE_CUDA_ATTENTION_WGMMA", "1"}, {"FORGE_CUDA_ATTENTION_WGMMA_KEYS", "128"}}, Precision::kBf16),
      backend_with({{"FORGE_CUDA_ATTENTION_WGMMA", "2"}, {"FORGE_CUDA_ATTENTION_WGMMA_KEYS", "128"}}, Precision::kBf16)};
  DeviceArray<float> one(B, 1), one16(B16, 1), one_exact(Bx, 1), one_1(*gpu_one, 1), one16_1(*gpu16_one, 1);
  DeviceArray<float> one16_wgmma[2] = {DeviceArray<float>(*gpu16_wgmma[0], 1), DeviceArray<float>(*gpu16_wgmma[1], 1)};
  DeviceArray<float> one16_wgmma128[2] = {DeviceArray<float>(*gpu16_wgmma128[0], 1),
                                          DeviceArray<float>(*gpu16_wgmma128[1], 1)};
  // Median seconds of fn, each run drained by a copy to the host from be.
  auto time_on = [&](Backend& be, DeviceArray<float>& x, const std::function<void()>& fn) {
    return bench::median_seconds(2, reps, [&] {
      fn();
      float h;
      be.to_host(&h, x.data(), sizeof h);
    });
  };
  auto time = [&](const std::function<void()>& fn) { return time_on(B, one, fn); };
  auto time16 = [&](const std::function<void()>& fn) { return time_on(B16, one16, fn); };
  auto time_exact = [&](const std::function<void()>& fn) { return time_on(Bx, one_exact, fn); };
  Rng rng(1);
  std::printf("bench_cuda_kernels: %d tokens, median of %d\n", T, reps);
  header();

  // Memory-bound kernels at d = 4096, F = 11008 (Llama-7B shapes).
  const int d = 4096, F = 11008;
  DeviceArray<float> x(B, size_t(T) * d), y(B, size_t(T) * d), w(B, d), rstd(B, T);
  x.upload(randn(rng, size_t(T) * d));
  w.upload(randn(rng, d));
  const double Td = double(T) * d;
  row("rmsnorm_fwd d=4096", time([&] { B.rmsnorm_fwd(x.data(), w.data(), y.data(), rstd.data(), T, d, 1e-5f); }), 3 * Td, 8 * Td);
  DeviceArray<float> gu(B, size_t(T) * 2 * F), act(B, size_t(T) * F);
  gu.upload(randn(rng, size_t(T) * 2 * F));
  row("swiglu_fwd F=11008", time([&] { B.swiglu_fwd(gu.data(), act.data(), T, F); }), 0, 12.0 * T * F);
  DeviceArray<float> dgu(B, size_t(T) * 2 * F);
  row("swiglu_bwd F=11008", time([&] { B.swiglu_bwd(gu.data(), act.data(), dgu.data(), T, F); }), 0, 20.0 * T * F);
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = t;
  DeviceArray<int32_t> dpos(B, T);
  dpos.upload(pos);
  std::vector<double> inv_freq(64);
  for (int i = 0; i < 64; ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / 128);
  row("rope 32 heads x 128", time([&] { B.rope(x.data(), dpos.data(), T, 32, 128, d, inv_freq.data(), false); }), 0, 8 * Td);
  const size_t n = size_t(64) << 20;
  DeviceArray<float> p(B, n), g(B, n), m(B, n), v(B, n);
  for (auto* a : {&p, &g, &m, &v}) B.fill(a->data(), 0.01f, n);
  AdamWParams ap;
  ap.lr = 1e-4f;
  row("adamw 64M params", time([&] { B.adamw(p.data(), g.data(), m.data(), v.data(), n, ap); }), 0, 28.0 * n);
  row("gemm 4096^3 (cuBLAS FP32)", time([&] { B.gemm(false, true, 4096, 4096, 4096, 1.0f, p.data(), 4096, g.data(), 4096, 0.0f, m.data(), 4096); }),
      2.0 * 4096 * 4096 * 4096, 0);
  row("gemm 4096^3 (bf16 in, FP32 acc)", time16([&] { B16.gemm(false, true, 4096, 4096, 4096, 1.0f, p.data(), 4096, g.data(), 4096, 0.0f, m.data(), 4096); }),
      2.0 * 4096 * 4096 * 4096, 0);

  // Policy loss (CISPO, token mask): 1024 samples of 256 tokens; the bytes it
  // must move are lp and mu read and coef written (12 per token).
  {
    const int S = 1024, L = 256;
    PolicyLossConfig lc;
    lc.is_mask = "token";
    PackedPolicyTokens batch;
    for (int s = 0; s < S; ++s) {
      SampleTokens st;
      st.advantage = static_cast<float>(rng.normal());
      st.behaviour_logprob = randn(rng, L, 0.5f);
      st.logprob = randn(rng, L, 0.5f);
      batch.add(st);
    }
    DeviceArray<int32_t> begin(B, S + 1);
    DeviceArray<float> adv(B, S), mu(B, size_t(S) * L), lp(B, size_t(S) * L), coef(B, size_t(S) * L);
    begin.upload(batch.sample_begin);
    adv.upload(batch.advantage);
    mu.upload(batch.behaviour_logprob);
    lp.upload(batch.logprob);
    PolicyLossArgs la = lc.backend_args();
    la.samples = S;
    la.sample_begin = begin.data();
    la.advantage = adv.data();
    la.behaviour_logprob = mu.data();
    la.logprob = lp.data();
    la.coef = coef.data();
    row("policy loss cispo 1024 x 256", time([&] { B.policy_loss(la); }), 0, 12.0 * S * L);
  }

  // Tree attention on a causal chain and on a tree bin.
  const int ld = (H + 2 * Hkv) * D;
  double flash_fraction[2] = {-1, -1};  // forge bf16 / torch bf16 flash throughput, causal (fwd, bwd)
  double fp32_fraction[2] = {-1, -1};   // forge FP32 (default) / torch FP32 memory-efficient, causal
  // one-tile steps' time / the default's, causal: FP32 fwd, bwd, bf16 fwd, bwd
  double one_tile_ratio[4] = {-1, -1, -1, -1};
  // wgmma with 1 and 2 warpgroups, causal (fwd, bwd): time; over the default's time; of flash's throughput
  double wgmma_time[2][2] = {{-1, -1}, {-1, -1}}, wgmma_ratio[2][2] = {{-1, -1}, {-1, -1}};
  double wgmma_flash[2][2] = {{-1, -1}, {-1, -1}};
  // their forwards in 128-key steps, causal (x1, x2): time; over the 64-key step's; of flash's throughput
  double wgmma128_time[2] = {-1, -1}, wgmma128_ratio[2] = {-1, -1}, wgmma128_flash[2] = {-1, -1};
  const PackedBin bin = bench::agent_tree_bin(rng, T, "--tokens");
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<int32_t> se(kind ? bin.subtree_end : std::vector<int32_t>(T, T));
    const int n_tok = static_cast<int>(se.size());
    const double pairs = bench::visible_pairs(se);
    DeviceArray<float> qkv(B, size_t(n_tok) * ld), out(B, size_t(n_tok) * H * D), lse(B, size_t(H) * n_tok);
    DeviceArray<float> dout(B, size_t(n_tok) * H * D), dqkv(B, size_t(n_tok) * ld);
    DeviceArray<int32_t> dse(B, n_tok);
    qkv.upload(randn(rng, size_t(n_tok) * ld));
    dout.upload(randn(rng, size_t(n_tok) * H * D));
    dse.upload(se);
    const TreeAttentionArgs a =
        fused_tree_attention_args(n_tok, H, Hkv, D, qkv.data(), ld, dse.data(), out.data(), lse.data());
    const TreeAttentionGrads ag = fused_tree_attention_grads(H, Hkv, D, dout.data(), dqkv.data());
    const std::string what = kind ? "tree bin T=" + std::to_string(n_tok) : "causal T=" + std::to_string(n_tok);
    const double fwd32 = time([&] { B.tree_attention_fwd(a); }), bwd32 = time([&] { B.tree_attention_bwd(a, ag); });
    row(("attn fwd " + fp32_mode + " " + what).c_str(), fwd32, 4.0 * D * H * pairs, 0);
    row(("attn bwd " + fp32_mode + " " + what).c_str(), bwd32, 10.0 * D * H * pairs, 0);
    row(("attn fwd exact " + what).c_str(), time_exact([&] { Bx.tree_attention_fwd(a); }), 4.0 * D * H * pairs, 0);
    row(("attn bwd exact " + what).c_str(), time_exact([&] { Bx.tree_attention_bwd(a, ag); }),
        10.0 * D * H * pairs, 0);
    const double fwd16 = time16([&] { B16.tree_attention_fwd(a); });
    const double bwd16 = time16([&] { B16.tree_attention_bwd(a, ag); });
    row(("attn fwd bf16 " + what).c_str(), fwd16, 4.0 * D * H * pairs, 0);
    row(("attn bwd bf16 " + what).c_str(), bwd16, 10.0 * D * H * pairs, 0);
    const double one[4] = {time_on(*gpu_one, one_1, [&] { gpu_one->tree_attention_fwd(a); }),
                           time_on(*gpu_one, one_1, [&] { gpu_one->tree_attention_bwd(a, ag); }),
                           time_on(*gpu16_one, one16_1, [&] { gpu16_one->tree_attention_fwd(a); }),
                           time_on(*gpu16_one, one16_1, [&] { gpu16_one->tree_attention_bwd(a, ag); })};
    const double dflt[4] = {fwd32, bwd32, fwd16, bwd16};
    for (int m = 0; m < 4; ++m) {
      const std::string mode = (m < 2 ? fp32_mode : std::string("bf16")) + " 1 tile a step";
      row(((m % 2 ? "attn bwd " : "attn fwd ") + mode + " " + what).c_str(), one[m],
          (m % 2 ? 10.0 : 4.0) * D * H * pairs, 0);
      if (!kind) one_tile_ratio[m] = one[m] / dflt[m];
    }
    for (int w = 0; w < 2; ++w) {
      Backend& W = *gpu16_wgmma[w];
      const double fwd_wgmma = time_on(W, one16_wgmma[w], [&] { W.tree_attention_fwd(a); });
      const double bwd_wgmma = time_on(W, one16_wgmma[w], [&] { W.tree_attention_bwd(a, ag); });
      const std::string mode = w ? "bf16 wgmma x2 " : "bf16 wgmma ";
      row(("attn fwd " + mode + what).c_str(), fwd_wgmma, 4.0 * D * H * pairs, 0);
      row(("attn bwd " + mode + what).c_str(), bwd_wgmma, 10.0 * D * H * pairs, 0);
      Backend& W128 = *gpu16_wgmma128[w];
      const double fwd_wgmma128 = time_on(W128, one16_wgmma128[w], [&] { W128.tree_attention_fwd(a); });
      row(("attn fwd " + mode + "k128 " + what).c_str(), fwd_wgmma128, 4.0 * D * H * pairs, 0);
      if (!kind) {
        wgmma_time[w][0] = fwd_wgmma, wgmma_time[w][1] = bwd_wgmma;
        wgmma_ratio[w][0] = fwd_wgmma / fwd16, wgmma_ratio[w][1] = bwd_wgmma / bwd16;
        wgmma128_time[w] = fwd_wgmma128, wgmma128_ratio[w] = fwd_wgmma128 / fwd_wgmma;
      }
    }
    if (!with_torch) continue;
    std::string cmd = bench::python() + " " + bench::shell_quoted(bench::script("torch_sdpa.py")) + " --T " + std::to_string(n_tok) +
                      " --heads " + std::to_string(H) + " --kv-heads " + std::to_string(Hkv) + " --dim " +
                      std::to_string(D) + " --reps " + std::to_string(reps);
    char se_file[] = "/tmp/forge_bench_subtree_end_XXXXXX";
    if (kind) {
      const int fd = mkstemp(se_file);
      FILE* f = fd >= 0 ? fdopen(fd, "w") : nullptr;
      if (!f) {
        std::printf("  torch: no temporary file for the tree mask (%s); tree bin not timed\n", std::strerror(errno));
        continue;
      }
      for (int32_t e : se) std::fprintf(f, "%d\n", e);
      std::fclose(f);
      cmd += " --subtree-end " + std::string(se_file);
    }
    for (const std::string& line : bench::command_lines(cmd)) {
      char name[64];
      double fms, bms;
      if (std::sscanf(line.c_str(), "torch_sdpa %63s %lf %lf", name, &fms, &bms) == 3) {
        row(("torch " + std::string(name) + " fwd " + what).c_str(), fms / 1e3, 4.0 * D * H * pairs, 0);
        row(("torch " + std::string(name) + " bwd " + what).c_str(), bms / 1e3, 10.0 * D * H * pairs, 0);
        if (!kind && std::string(name) == "bf16_flash") {
          flash_fraction[0] = fms / 1e3 / fwd16;
          flash_fraction[1] = bms / 1e3 / bwd16;
          for (int w = 0; w < 2; ++w) {
            wgmma_flash[w][0] = fms / 1e3 / wgmma_time[w][0];
            wgmma_flash[w][1] = bms / 1e3 / wgmma_time[w][1];
            wgmma128_flash[w] = fms / 1e3 / wgmma128_time[w];
          }
        }
        if (!kind && std::string(name) == "fp32_efficient") {
          fp32_fraction[0] = fms / 1e3 / fwd32;
          fp32_fraction[1] = bms / 1e3 / bwd32;
        }
      } else {
        std::printf("  %s\n", line.c_str());
      }
    }
    if (kind) std::remove(se_file);
  }

  // FP32 head: R rows, vocab 32000, d 4096.
  const int R = std::min(T, 2048), V = 32000;
  DeviceArray<float> hw(B, size_t(V) * d), hd(B, size_t(R) * d), hlp(B, R), hlse(B, R), hent(B, R);
  DeviceArray<float> dlp(B, R), dh(B, size_t(R) * d), dw(B, size_t(V) * d);
  DeviceArray<int32_t> rb(B, R + 1), tg(B, R);
  std::vector<int32_t> rbh(R + 1), tgh(R);
  for (int r = 0; r <= R; ++r) rbh[r] = r;
  for (auto& t : tgh) t = static_cast<int32_t>(rng.below(V));
  rb.upload(rbh);
  tg.upload(tgh);
  hw.upload(randn(rng, size_t(V) * d, 0.02f));
  hd.upload(randn(rng, size_t(R) * d));
  B.fill(dlp.data(), 1.0f / R, R);
  HeadArgs ha;
  ha.R = R;
  ha.d = d;
  ha.V = V;
  ha.hidden = hd.data();
  ha.weight = hw.data();
  ha.E = R;
  ha.row_begin = rb.data();
  ha.target = tg.data();
  ha.logprob = hlp.data();
  ha.lse = hlse.data();
  ha.entropy = hent.data();
  HeadGrads hg{dlp.data(), dh.data(), dw.data()};
  const double head_flops = 2.0 * R * V * d;
  row("fp32 head fwd V=32000", time([&] { B.head_fwd(ha); }), head_flops, 0);
  row("fp32 head bwd V=32000", time([&] { B.head_bwd(ha, hg); }), 3 * head_flops, 0);
  row("fp32 head fwd V=32000, bf16 hidden", time16([&] { B16.head_fwd(ha); }), head_flops, 0);

  // Train step, reference model: tree-merged versus linear.
  ModelConfig c;
  c.vocab = ByteTokenizer::kVocabSize;
  PolicyModel model(c, B);
  model.init_random(1);
  OptimConfig oc;
  AdamW opt(oc, model);
  const auto samples = bench::agent_samples(rng, 4, 6, 256, 48, 24);
  double tok_s[2] = {0, 0};
  int64_t linear_tokens = 0;
  for (int merge = 0; merge < 2; ++merge) {
    SupervisedStats st;
    const double secs = time([&] {
      model.zero_grads();
      st = supervised_forward_backward(model, samples, merge, 1 << 14);
      opt.step();
    });
    linear_tokens = st.linear_tokens;
    tok_s[merge] = st.linear_tokens / secs;  // linear tokens per second in both: comparable
    row(merge ? "train step (tree)" : "train step (linear)", secs, 0, 0);
  }
  std::printf("train step: %lld linear tokens; tree/linear speedup %.2f\n",
              static_cast<long long>(linear_tokens), tok_s[1] / tok_s[0]);
  const auto pair = [](const double (&x)[2]) { return "[" + bench::num(x[0]) + ", " + bench::num(x[1]) + "]"; };
  bench::print_json({{"device", "\"cuda\""},
                     {"linear_tok_s", bench::num(tok_s[0])},
                     {"tree_tok_s", bench::num(tok_s[1])},
                     {"tree_speedup", bench::num(tok_s[1] / tok_s[0])},
                     {"attn_fwd_bf16_of_flash", bench::num(flash_fraction[0])},
                     {"attn_bwd_bf16_of_flash", bench::num(flash_fraction[1])},
                     {"fp32_attention", bench::json_string(fp32_mode)},
                     {"attn_fwd_fp32_of_torch_fp32", bench::num(fp32_fraction[0])},
                     {"attn_bwd_fp32_of_torch_fp32", bench::num(fp32_fraction[1])},
                     {"attn_fp32_one_tile_steps_over_default",
                      "[" + bench::num(one_tile_ratio[0]) + ", " + bench::num(one_tile_ratio[1]) + "]"},
                     {"attn_bf16_one_tile_steps_over_default",
                      "[" + bench::num(one_tile_ratio[2]) + ", " + bench::num(one_tile_ratio[3]) + "]"},
                     {"attn_bf16_wgmma_over_default", pair(wgmma_ratio[0])},
                     {"attn_bf16_wgmma_of_flash", pair(wgmma_flash[0])},
                     {"attn_bf16_wgmma2_over_default", pair(wgmma_ratio[1])},
                     {"attn_bf16_wgmma2_of_flash", pair(wgmma_flash[1])},
                     {"attn_fwd_bf16_wgmma_k128_over_k64", pair(wgmma128_ratio)},
                     {"attn_fwd_bf16_wgmma_k128_of_flash", pair(wgmma128_flash)}});
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
