// ModelConfig's checks: model_differences names every field that makes two
// models compute differently, including those the weights' shapes miss, and
// the parse-time checks refuse the RoPE rescaling values validate() refuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "backend/backend_registry.hpp"
#include "model/model_config.hpp"
#include "model/policy_model.hpp"

namespace forge {
namespace {

TEST(ModelConfig, DifferencesNameWhatTheShapesMiss) {
  ModelConfig a;
  a.vocab = 300;
  a.d_model = 32;
  a.n_heads = 2;
  a.n_kv_heads = 2;
  EXPECT_EQ(model_differences(a, a), "");
  ModelConfig b = a;
  b.n_heads = 4;
  b.n_kv_heads = 4;
  EXPECT_EQ(ParamLayout(a).total, ParamLayout(b).total);  // the same weights' shapes
  const std::string d = model_differences(a, b);
  EXPECT_NE(d.find("model.n_heads 2 against 4"), std::string::npos) << d;
  EXPECT_NE(d.find("model.n_kv_heads 2 against 4"), std::string::npos) << d;
  EXPECT_NE(d.find("head dimension 16 against 8"), std::string::npos) << d;
  EXPECT_EQ(d.find("d_model"), std::string::npos) << d;
  ModelConfig c = a;
  c.rope_base = 500000;
  c.norm_eps = 1e-6f;
  const std::string e = model_differences(a, c);
  EXPECT_NE(e.find("model.rope_base"), std::string::npos) << e;
  EXPECT_NE(e.find("model.norm_eps"), std::string::npos) << e;
}

TEST(ModelConfig, ParseTimeChecksRefuseBadRopeScaling) {
  for (const auto& [args, key] :
       {std::pair{std::vector<std::string>{"--model.rope_scaling=0.5"}, "model.rope_scaling"},
        std::pair{std::vector<std::string>{"--model.rope_scaling=2", "--model.rope_high_freq_factor=0.5"},
                  "model.rope_high_freq_factor"}}) {
    ModelConfig m;
    OptionSet o;
    add_model_options(o, m);
    try {
      o.parse(args);
      ADD_FAILURE() << "expected an InputError for " << args.back();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  ModelConfig m;
  OptionSet o;
  add_model_options(o, m);
  o.parse(std::vector<std::string>{"--model.rope_scaling=8"});  // Llama 3's
  EXPECT_EQ(m.rope_scaling.factor, 8.0f);
}

// A policy checks its configuration before it lays out its parameters: a
// head count of 0 was a division by zero (SIGFPE) in the layout.
TEST(ModelConfig, APolicyRefusesABadConfigurationBeforeLayingItOut) {
  ModelConfig c;
  c.vocab = 256;
  c.d_model = 32;
  c.n_layers = 1;
  c.n_heads = 0;
  c.n_kv_heads = 0;
  c.ffn_dim = 64;
  auto backend = make_backend("cpu");
  EXPECT_THROW(PolicyModel(c, *backend), InputError);
}

}  // namespace
}  // namespace forge
