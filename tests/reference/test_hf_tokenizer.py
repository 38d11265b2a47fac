#!/usr/bin/env python3
"""forge's byte-level BPE against the Hugging Face tokenizers library.

The vocabulary and merges of SmolLM2-135M-Instruct (from its GGUF file), with
each pre-tokenizer forge implements (gpt2, smollm, llama3, qwen2): the
reference is a tokenizers.Tokenizer built from the same vocabulary, merges and
special tokens (hf_reference.hf_tokenizer; NFC for qwen2, as its
tokenizer.json, with strings made to exercise it; forge's NFC is also
compared with Python's unicodedata). On a corpus of 12,000 strings (tokenizer_corpus.py: code,
unicode, emoji, digit runs, whitespace runs, contractions, special-token text,
agent transcripts) forge must give the same token ids for every string, and
decoding them must give the reference's text (and the string back wherever
the reference round-trips). The first mismatches are printed.

  test_hf_tokenizer.py --build-dir BUILD [--pre NAME] [--limit N]
Exit 77 (skip) without the reference packages or the model file.
"""
import argparse
import json
import os
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref  # noqa: E402
import tokenizer_corpus  # noqa: E402


def forge_run(dump, args, lines):
    p = subprocess.run([dump] + args, input="".join(lines), capture_output=True, text=True, encoding="utf-8",
                       errors="surrogateescape")
    if p.returncode != 0:
        sys.exit(f"forge_hf_dump {' '.join(args[:1])} failed ({p.returncode}): {p.stderr.strip()}")
    return [json.loads(x) for x in p.stdout.split("\n") if x]


def count_differs(what, got, want):
    """1 (and says so) when forge gave another number of answers than asked."""
    if len(got) == len(want):
        return 0
    print(f"  {what}: forge answered {len(got)} of {len(want)} strings")
    return 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--pre", choices=ref.PRE_TOKENIZERS, action="append")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    model = ref.require_smollm2()
    dump = os.path.join(args.build_dir, "tests", "forge_hf_dump")
    vocab = ref.gguf_vocab(model)
    corpus = tokenizer_corpus.corpus()
    if args.limit:
        corpus = corpus[:args.limit]
    assert len(corpus) >= 10000 or args.limit, len(corpus)
    failures = 0
    # NFC (Qwen2's normalizer) against Python's unicodedata, on the corpus
    # and on text made to exercise it: decomposed letters, marks out of
    # canonical order, Hangul jamo, composition exclusions and singletons.
    nfc_cases = corpus + tokenizer_corpus.nfc_corpus()
    got_nfc = forge_run(dump, ["nfc", model], [json.dumps(s) + "\n" for s in nfc_cases])
    if count_differs("nfc", got_nfc, nfc_cases):
        return 1
    bad_nfc = [i for i, s in enumerate(nfc_cases) if got_nfc[i] != unicodedata.normalize("NFC", s)]
    for i in bad_nfc[:5]:
        print(f"  nfc of {nfc_cases[i]!r}\n    forge {got_nfc[i]!r}\n    python {unicodedata.normalize('NFC', nfc_cases[i])!r}")
    print(f"nfc: {len(nfc_cases)} strings, {len(bad_nfc)} differ from unicodedata {unicodedata.unidata_version}")
    failures += len(bad_nfc)
    for pre in args.pre or ref.PRE_TOKENIZERS:
        nfc = pre == "qwen2"  # as Qwen2's tokenizer.json
        tok = ref.hf_tokenizer(vocab["tokens"], vocab["merges"], vocab["token_types"], pre, nfc=nfc)
        cases = corpus + tokenizer_corpus.nfc_corpus() if nfc else corpus
        lines = [json.dumps(s) + "\n" for s in cases]
        want = [e.ids for e in tok.encode_batch(cases, add_special_tokens=False)]
        got = forge_run(dump, ["tokenize", model, "--pre", pre, "--nfc", "on" if nfc else "off"], lines)
        # One line per string (zip stops at the shorter list: a forge that
        # answered one line passed).
        failures += count_differs(f"{pre}: encodings", got, want)
        bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
        for i in bad[:5]:
            print(f"  {pre}: string {i} {cases[i]!r}\n    forge {got[i][:40]}\n    hf    {want[i][:40]}")
        # Decoding: forge's text of the reference ids equals the reference's decoding.
        texts = forge_run(dump, ["decode", model], [json.dumps(ids) + "\n" for ids in want])
        hf_texts = tok.decode_batch(want, skip_special_tokens=False)
        failures += count_differs(f"{pre}: decodings", texts, hf_texts)
        bad_decode = [i for i, (a, b) in enumerate(zip(texts, hf_texts)) if a != b]
        for i in bad_decode[:5]:
            print(f"  {pre}: decode of string {i} {cases[i]!r}\n    forge {texts[i]!r}\n    hf    {hf_texts[i]!r}")
        round_trips = sum(1 for s, t in zip(cases, hf_texts) if s == t)
        lost = [i for i, (s, t, h) in enumerate(zip(cases, texts, hf_texts)) if h == s and t != s]
        tokens = sum(len(x) for x in want)
        print(f"{pre}: {len(cases)} strings, {tokens} tokens: {len(bad)} encodings differ, "
              f"{len(bad_decode)} decodings differ; {round_trips} strings round-trip, {len(lost)} of those not in forge")
        failures += len(bad) + len(bad_decode) + len(lost)
    if failures:
        print(f"FAIL: {failures} mismatches")
        return 1
    print("OK: forge's BPE equals the reference on every string")
    return 0


if __name__ == "__main__":
    sys.exit(main())
