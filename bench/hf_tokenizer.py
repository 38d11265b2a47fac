#!/usr/bin/python3
"""The Hugging Face side of bench_tokenizer: writes the corpus (one JSON string
per line: tests/reference/tokenizer_corpus.py, agent transcripts, code,
unicode, emoji, digit and whitespace runs, special-token text) to --out, then
times tokenizers.Tokenizer.encode over it on one core (the vocabulary, merges,
specials and pre-tokenizer of --model's GGUF, as the tokenizer oracle test
builds it) and prints

  hf_encode_s X        median seconds to encode the corpus, string by string
                       (Tokenizer.encode: one call from Python per string)
  hf_batch_s X         the same with one Tokenizer.encode_batch call (the Rust
                       loop without Python between strings; RAYON_NUM_THREADS=1)
  hf_tokens N          tokens in all
  hf_bytes N           UTF-8 bytes in all

Without the reference packages it prints nothing after writing the corpus.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import hf_reference as ref  # noqa: E402
import tokenizer_corpus  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--strings", type=int, default=12000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    corpus = tokenizer_corpus.corpus(args.strings)
    with open(args.out, "w", encoding="utf-8", errors="surrogateescape") as f:
        for s in corpus:
            f.write(json.dumps(s) + "\n")
    if args.reps <= 0 or not os.path.isdir(ref.pyref_dir()):
        return 0
    ref._add_pyref_path()
    vocab = ref.gguf_vocab(args.model)
    tok = ref.hf_tokenizer(vocab["tokens"], vocab["merges"], vocab["token_types"], vocab["pre"])
    times, tokens = [], 0
    for _ in range(args.reps + 1):  # the first run warms up
        t = time.perf_counter()
        tokens = sum(len(tok.encode(s, add_special_tokens=False).ids) for s in corpus)
        times.append(time.perf_counter() - t)
    print(f"hf_encode_s {statistics.median(times[1:]):.6f}")
    batch = []
    for _ in range(args.reps + 1):
        t = time.perf_counter()
        tok.encode_batch(corpus, add_special_tokens=False)
        batch.append(time.perf_counter() - t)
    print(f"hf_batch_s {statistics.median(batch[1:]):.6f}")
    print(f"hf_tokens {tokens}")
    print(f"hf_bytes {sum(len(s.encode('utf-8', 'surrogatepass')) for s in corpus)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
