#include "algo/token_loss.hpp"

#include "core/error.hpp"

namespace forge {

std::vector<float> entry_weights(const PackedBin& bin, const TokenCoefficient& coef) {
  std::vector<float> w(bin.entries(), 0.0f);
  for (int32_t e = 0; e < bin.entries(); ++e)
    for (int32_t r = bin.ref_begin[e]; r < bin.ref_begin[e + 1]; ++r) w[e] += coef(bin.refs[r]);
  return w;
}

int64_t trainable_token_count(const std::vector<Sample>& samples) {
  int64_t n = 0;
  for (const auto& s : samples)
    for (uint8_t t : s.trainable) n += t != 0;
  return n;
}

SupervisedStats supervised_forward_backward(PolicyModel& model, const std::vector<Sample>& samples,
                                            bool merge, int32_t max_tokens) {
  SupervisedStats st;
  st.trained_tokens = trainable_token_count(samples);
  st.linear_tokens = linear_token_count(samples);
  if (st.trained_tokens == 0) throw InputError("batch has no trainable tokens");
  const float c = 1.0f / static_cast<float>(st.trained_tokens);
  const PrefixForest forest = build_prefix_forest(samples, merge);
  const std::vector<PackedBin> bins = pack_forest(forest, max_tokens);
  st.bins = static_cast<int>(bins.size());
  BinForward fwd;
  for (const PackedBin& bin : bins) {
    st.packed_tokens += bin.tokens();
    const std::vector<float> w = entry_weights(bin, [c](const SampleRef&) { return c; });
    model.forward(bin, 1.0f, &fwd);
    std::vector<float> dlogprob(w.size());
    for (size_t e = 0; e < w.size(); ++e) {
      st.loss -= static_cast<double>(w[e]) * fwd.logprob[e];
      dlogprob[e] = -w[e];
    }
    model.backward(dlogprob);
  }
  return st;
}

}  // namespace forge
