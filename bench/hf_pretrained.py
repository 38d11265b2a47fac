#!/usr/bin/python3
"""The transformers side of bench_pretrained: the same model (a GGUF file,
loaded as hf_reference.load_smollm2_transformers does, or a Hugging Face
folder), FP32 on the CPU with the same threads; prints

  hf_train_tok_s X          one full step (forward, backward, clipping, AdamW)
                            on SEQS random sequences of SEQ tokens, token-mean NLL
  hf_prefill_tok_s B X      prompt tokens/s of generate() with one new token
                            (PROMPT random tokens at batch B)
  hf_decode_tok_s B X       decode tokens/s: generate() of NEW greedy tokens (no
                            stop token) minus generate() of one, B x (NEW - 1)
                            tokens over the difference
  hf_blas_core NAME         the OpenBLAS core torch's GEMMs ran on

Medians of REPS timed runs after one warm-up. Without the reference packages
it prints "hf_unavailable <reason>" and exits 0 (the benchmark then reports
null); a decode time not above the one-token time is an error, exit 1.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import hf_reference as ref  # noqa: E402


def median_time(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    if not os.path.isdir(ref.pyref_dir()):
        print(f"hf_unavailable the reference packages are not installed ({ref.pyref_dir()}; tools/setup.sh installs them)")
        return 0
    ref._add_pyref_path()
    import torch
    from torch_train_step import blas_core
    print(f"hf_blas_core {blas_core()}", flush=True)
    torch.set_num_threads(args.threads)
    if args.model.endswith(".gguf"):
        model, _ = ref.load_smollm2_transformers(args.model)
    else:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(3)

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), eps=1e-15, weight_decay=0.1)
    ids = torch.randint(vocab, (args.seqs, args.seq), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(ids).logits[:, :-1].float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    print(f"hf_train_tok_s {args.seqs * args.seq / median_time(step, args.reps):.3f}", flush=True)

    model.eval()
    model.generation_config.eos_token_id = None
    for b in [int(x) for x in args.batches.split(",")]:
        prompt = torch.randint(vocab, (b, args.prompt), generator=g)

        def gen(n):
            with torch.no_grad():
                model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                               min_new_tokens=n, do_sample=False, pad_token_id=0)

        first = median_time(lambda: gen(1), args.reps)
        full = median_time(lambda: gen(args.new), args.reps)
        print(f"hf_prefill_tok_s {b} {b * args.prompt / first:.3f}", flush=True)
        if full <= first:  # the difference is the measurement: no clamping
            print(f"hf_pretrained.py: decode at batch {b}: {args.new} tokens took {full:.4f} s, not longer than "
                  f"one token ({first:.4f} s); raise --new or --reps", file=sys.stderr)
            return 1
        print(f"hf_decode_tok_s {b} {b * (args.new - 1) / (full - first):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
