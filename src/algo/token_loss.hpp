// Token-level losses on packed tree bins.
//
// A loss is given per (sample, position) of a generated token as a
// coefficient c_{s,p}; the linear loss is L = -sum_{s,p} c_{s,p} logprob_{s,p}.
// On a tree bin an entry e stands for all (s, p) in its refs, which share one
// logprob, so L = -sum_e w_e logprob_e with w_e = sum_{refs} c_{s,p}: the tree
// loss and its gradients equal the linear ones (docs/architecture.md, "Prefix tree").
//
// The supervised loss is the token mean: c = 1 / (number of trainable tokens
// of the whole batch), the same in every bin of the batch.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/policy_model.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

namespace forge {

using TokenCoefficient = std::function<float(const SampleRef&)>;

std::vector<float> entry_weights(const PackedBin& bin, const TokenCoefficient& coef);

int64_t trainable_token_count(const std::vector<Sample>& samples);

struct SupervisedStats {
  double loss = 0;              // token-mean NLL over the batch
  int64_t trained_tokens = 0;   // trainable tokens (linear count)
  int64_t linear_tokens = 0;    // all tokens, each sample alone
  int64_t packed_tokens = 0;    // tokens actually run (tree or linear)
  int bins = 0;
};

// Forward and backward of the token-mean NLL of `samples`, tree-merged
// (merge = true) or each sample alone; gradients accumulate in the model.
SupervisedStats supervised_forward_backward(PolicyModel& model, const std::vector<Sample>& samples,
                                            bool merge, int32_t max_tokens);

}  // namespace forge
