// Writes a rollouts.h5 the way `forge train` does, from a tiny random policy
// running real agent episodes (env mix, perturbed scaffolds, tool noise) and
// real policy updates, for tests/reference/test_hdf5_schema.py and for trying
// `forge inspect` / `forge export` / tools/plot_rollouts.py:
//
//   forge_rollout_store_dump OUT.h5 [STEPS=3] [TASKS=2] [GROUP=2]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "agent/agent_config.hpp"
#include "agent/agent_episode.hpp"
#include "agent/run_episodes.hpp"
#include "algo/policy_update.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"
#include "cpu/cpu_backend.hpp"
#include "env/env_mix.hpp"
#include "env/perturbation.hpp"
#include "io_hdf5/rollout_store.hpp"
#include "model/optimizer.hpp"
#include "model/rollout_engine.hpp"
#include "model/tokenizer.hpp"

int main(int argc, char** argv) {
  using namespace forge;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.h5 [STEPS] [TASKS] [GROUP]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3;
  const int tasks = argc > 3 ? std::atoi(argv[3]) : 2;
  const int group = argc > 4 ? std::atoi(argv[4]) : 2;
  try {
    auto backend = make_backend("cpu");
    ModelConfig mc;
    mc.vocab = Tokenizer::kVocabSize;
    mc.d_model = 32, mc.n_layers = 1, mc.n_heads = 2, mc.n_kv_heads = 2, mc.ffn_dim = 64;
    PolicyModel model(mc, *backend);
    model.init_random(5);
    OptimConfig oc;
    oc.total_steps = steps;
    AdamW opt(oc, model);

    EnvConfig env;
    AgentConfig agent;
    agent.max_turns = 3;
    agent.max_new_tokens = 16;
    agent.sampling.max_new_tokens = agent.max_new_tokens;
    const EnvMix mix(env);
    const PerturbationSampler sampler(env.perturb, env.heldout_list());
    const int batch = tasks * group;
    EngineConfig ec;
    ec.max_batch = batch;
    ec.max_seq_len = agent.max_context_tokens + agent.max_new_tokens;
    ec.kv_cache_tokens = static_cast<int64_t>(batch) * ec.max_seq_len * 2;
    RolloutEngine engine(model, ec);
    PolicyUpdateConfig upd;

    RolloutStoreOptions so;
    so.config_ini = "[model]\nd_model = 32\n[train]\nsteps = " + std::to_string(steps) + "\n";
    so.domains = mix.domains();
    RolloutStore store(argv[1], so);
    Rng task_rng(11);
    for (int step = 0; step < steps; ++step) {
      Stopwatch sw;
      engine.set_policy_version(step);
      std::vector<AgentEpisode> episodes;
      for (int k = 0; k < tasks; ++k) {
        const uint64_t task_seed = task_rng.next_u64();
        for (int g = 0; g < group; ++g)
          episodes.push_back(make_episode(mix, sampler, agent, task_seed,
                                          static_cast<uint64_t>(step) * batch + k * group + g,
                                          StyleMode::kTrain, k));
      }
      run_episodes(engine, episodes);
      std::vector<Trajectory> trajs;
      int64_t generated = 0;
      for (auto& e : episodes) {
        trajs.push_back(e.take_trajectory());
        for (const auto& c : trajs.back().calls) generated += static_cast<int64_t>(c.generated.size());
      }
      const double gen_s = sw.seconds();
      model.zero_grads();
      const PolicyUpdateStats st = policy_forward_backward(model, trajs, upd);
      if (st.samples) opt.step();
      engine.clear_prefix_cache();
      store.append_episodes(trajs, step, step);
      store.append_step(step_metrics(step, st, generated / std::max(gen_s, 1e-9), sw.seconds()));
    }
    store.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rollout_store_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
