// ProfiledBackend (backend/profiled_backend.hpp): it forwards every operation
// unchanged, so a train step on it equals the inner backend's bit for bit;
// while enabled it records each operation it ran, GEMMs by transposition with
// their FLOPs; disabled it records nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "backend/device_array.hpp"
#include "backend/profiled_backend.hpp"
#include "core/rng.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"
#include "tiny_agent_model.hpp"

namespace forge {
namespace {

std::vector<Sample> random_samples(int n, int len) {
  Rng rng(5);
  std::vector<Sample> samples(n);
  for (auto& s : samples) {
    s.tokens.resize(len);
    for (auto& t : s.tokens) t = static_cast<int32_t>(rng.below(200));
    s.trainable.assign(len, 1);
    s.trainable[0] = 0;
  }
  return samples;
}

// Parameters after two SFT steps on `backend`.
std::vector<float> two_steps(Backend& backend, const std::vector<Sample>& samples) {
  PolicyModel model(tiny_agent_model_config(), backend);
  model.init_random(3);
  OptimConfig oc;
  oc.lr = 1e-3f;
  AdamW opt(oc, model);
  for (int step = 0; step < 2; ++step) {
    model.zero_grads();
    supervised_forward_backward(model, samples, false, 120);  // one bin
    opt.step();
  }
  return model.get_params();
}

const OpTime* find(const std::vector<OpTime>& times, const std::string& op) {
  for (const auto& t : times)
    if (t.op == op) return &t;
  return nullptr;
}

TEST(ProfiledBackend, TrainStepEqualsTheInnerBackendAndRecordsItsOperations) {
  auto cpu = make_backend("cpu");
  const auto samples = random_samples(3, 40);
  const std::vector<float> plain = two_steps(*cpu, samples);

  ProfiledBackend prof(*cpu);
  prof.set_enabled(true);
  const std::vector<float> profiled = two_steps(prof, samples);
  ASSERT_EQ(plain.size(), profiled.size());
  EXPECT_EQ(std::memcmp(plain.data(), profiled.data(), plain.size() * sizeof(float)), 0)
      << "the profiled step differs from the inner backend's";

  const auto times = prof.times();
  for (const char* op : {"gemm NT", "linear backward", "tree_attention_fwd", "tree_attention_bwd", "head_fwd",
                         "head_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "swiglu_fwd", "swiglu_bwd", "adamw"}) {
    const OpTime* t = find(times, op);
    ASSERT_NE(t, nullptr) << op << " was not recorded";
    EXPECT_GT(t->calls, 0) << op;
    EXPECT_GT(t->seconds, 0.0) << op;
  }
  // Attention runs once per layer and step, forward and backward.
  const int layers = tiny_agent_model_config().n_layers;
  EXPECT_EQ(find(times, "tree_attention_fwd")->calls, 2 * layers);
  EXPECT_EQ(find(times, "tree_attention_bwd")->calls, 2 * layers);
  EXPECT_EQ(find(times, "gemm TT"), nullptr);
  // The four linear layers' backward GEMMs go as linear_backward, each one row.
  EXPECT_EQ(find(times, "linear backward")->calls, 2 * 4 * layers);
  EXPECT_EQ(find(times, "gemm NN"), nullptr);
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end(),
                             [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; }));

  const std::string table = op_profile_table(times, 2);
  EXPECT_NE(table.find("tree_attention_bwd"), std::string::npos) << table;
  EXPECT_NE(table.find("sum"), std::string::npos) << table;
  const std::string json = op_profile_json(times, 2);
  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"gemm NT\": "), std::string::npos) << json;
}

TEST(ProfiledBackend, GemmRowsCarryTheirFlopsAndDisabledRecordsNothing) {
  auto cpu = make_backend("cpu");
  ProfiledBackend prof(*cpu);
  const int M = 7, N = 5, K = 3;
  DeviceArray<float> A(prof, M * K), B(prof, N * K), C(prof, M * N);
  prof.fill(A.data(), 1.0f, M * K);
  prof.fill(B.data(), 2.0f, N * K);
  prof.gemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
  EXPECT_TRUE(prof.times().empty()) << "recorded while disabled";
  EXPECT_FLOAT_EQ(C.data()[0], 6.0f) << "disabled, the GEMM must still run";

  prof.set_enabled(true);
  for (int i = 0; i < 3; ++i) prof.gemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
  prof.gemm(true, false, K, N, M, 1.0f, A.data(), K, C.data(), N, 0.0f, B.data(), N);
  const auto times = prof.times();
  ASSERT_EQ(times.size(), 2u);
  const OpTime* nt = find(times, "gemm NT");
  const OpTime* tn = find(times, "gemm TN");
  ASSERT_TRUE(nt && tn);
  EXPECT_EQ(nt->calls, 3);
  EXPECT_DOUBLE_EQ(nt->flops, 3 * 2.0 * M * N * K);
  EXPECT_EQ(tn->calls, 1);
  EXPECT_DOUBLE_EQ(tn->flops, 2.0 * K * N * M);
  prof.reset();
  EXPECT_TRUE(prof.times().empty());
}

// linear_backward: one row with both GEMMs' FLOPs (4 T in out), the inner
// backend's results.
TEST(ProfiledBackend, LinearBackwardIsOneRowWithBothGemmsFlops) {
  auto cpu = make_backend("cpu");
  ProfiledBackend prof(*cpu);
  prof.set_enabled(true);
  const int T = 6, in = 4, out = 3;
  DeviceArray<float> dy(prof, T * out), W(prof, out * in), x(prof, T * in), dx(prof, T * in), dW(prof, out * in);
  prof.fill(dy.data(), 1.0f, T * out);
  prof.fill(W.data(), 2.0f, out * in);
  prof.fill(x.data(), 3.0f, T * in);
  prof.fill(dW.data(), 1.0f, out * in);
  prof.linear_backward(T, in, out, dy.data(), out, W.data(), x.data(), in, dx.data(), in, dW.data());
  EXPECT_FLOAT_EQ(dx.data()[0], 2.0f * out);     // sum over out of 1 * 2
  EXPECT_FLOAT_EQ(dW.data()[0], 1.0f + 3.0f * T);  // 1 + sum over T of 1 * 3
  const auto times = prof.times();
  const OpTime* lb = find(times, "linear backward");
  ASSERT_NE(lb, nullptr);
  EXPECT_EQ(lb->calls, 1);
  EXPECT_DOUBLE_EQ(lb->flops, 4.0 * T * in * out);
}

}  // namespace
}  // namespace forge
