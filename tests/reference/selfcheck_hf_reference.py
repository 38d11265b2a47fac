#!/usr/bin/env python3
"""Self-check of hf_reference.py and tokenizer_corpus.py (CTest: HfReference.SelfCheck).

  the SmolLM2 GGUF vocabulary (sizes, control tokens, bos/eos, template)
  every hf_tokenizer pre-tokenizer ("gpt2", "smollm", "llama3", "qwen2") on 200
    corpus strings: decode(encode(s)) == s (NFC(s) for qwen2) unless s holds a
    byte the vocabulary lacks; specials encode to their ids; a few known splits
  every random_model kind written to a temporary folder, reloaded with
    AutoModelForCausalLM + AutoTokenizer: same logits, same token ids, tied /
    bias / rope-scaling details as documented; llama_headdim is reported as
    unsupported; one bfloat16 checkpoint
  --smollm2: also the GGUF state dict against transformers' own GGUF loader
    (bit-exact) and the greedy answer to "What is 17 times 3?"

One line per check; exit 0 if all pass, 1 otherwise, 77 (skip) when the
reference packages or the SmolLM2 GGUF are absent.
"""
import argparse
import os
import sys
import tempfile
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as H  # noqa: E402
from tokenizer_corpus import corpus  # noqa: E402

FAILURES = []
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # SmolLM2 ids 0, 1, 2


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        FAILURES.append(what)


def missing_bytes(tokens):
    """Bytes whose GPT-2 byte-level symbol is not a vocabulary token."""
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    have = set(tokens)
    return {b for b, u in bytes_to_unicode().items() if u not in have}


def check_vocab(vocab):
    tt = vocab["token_types"]
    controls = [vocab["tokens"][i] for i, t in enumerate(tt) if t == 3]
    check(len(vocab["tokens"]) == 49152 and len(tt) == 49152, f"vocab: {len(vocab['tokens'])} tokens")
    check(len(vocab["merges"]) == 48900 and all(m.count(" ") == 1 for m in vocab["merges"]),
          f"vocab: {len(vocab['merges'])} merges 'a b'")
    check(controls[:3] == SPECIALS and len(controls) == 17, f"vocab: {len(controls)} control tokens")
    check((vocab["bos_id"], vocab["eos_id"], vocab["pad_id"]) == (1, 2, 2), "vocab: bos 1, eos 2, pad 2")
    check(vocab["pre"] == "smollm" and vocab["model"] == "gpt2", f"vocab: model {vocab['model']}, pre {vocab['pre']}")
    check("<|im_start|>" in (vocab["chat_template"] or ""), "vocab: ChatML chat_template")


def check_tokenizers(vocab, texts):
    lacking = missing_bytes(vocab["tokens"])
    print(f"     bytes without a vocabulary symbol (dropped by BPE): {sorted(lacking)}")
    expected_splits = {  # pre-tokenizer -> text -> pieces (before byte-level mapping)
        "gpt2": {"I'M 12345 ab": ["I", "'", "M", "Ġ12345", "Ġab"]},  # GPT-2's 's|'t|.. is case-sensitive
        "smollm": {"I'M 12345 ab": ["I", "'", "M", "Ġ", "1", "2", "3", "4", "5", "Ġab"]},
        "llama3": {"I'M 12345 ab": ["I", "'M", "Ġ", "123", "45", "Ġab"]},
        "qwen2": {"I'M 12345 ab": ["I", "'M", "Ġ", "1", "2", "3", "4", "5", "Ġab"]},
    }
    ids = {}
    for pre in H.PRE_TOKENIZERS:
        tok = H.hf_tokenizer(vocab["tokens"], vocab["merges"], vocab["token_types"], pre)
        encs = tok.encode_batch(texts, add_special_tokens=False)
        ids[pre] = [e.ids for e in encs]
        exact = lossy_expected = 0
        bad = []
        for s, e in zip(texts, encs):
            want = unicodedata.normalize("NFC", s) if pre == "qwen2" else s
            if tok.decode(e.ids, skip_special_tokens=False) == want:
                exact += 1
            elif set(want.encode("utf-8")) & lacking:
                lossy_expected += 1
            else:
                bad.append(s)
        check(not bad, f"tokenizer {pre}: {len(texts)} strings, {sum(map(len, ids[pre]))} tokens, "
                       f"{exact} round-trip, {lossy_expected} lose a missing byte, {len(bad)} other "
                       f"{[s[:40] for s in bad[:3]]}")
        specials = [tok.encode(s, add_special_tokens=False).ids for s in SPECIALS]
        check(specials == [[0], [1], [2]], f"tokenizer {pre}: specials -> {specials}")
        partial = tok.encode("<|im_", add_special_tokens=False).ids
        check(all(i > 16 for i in partial), f"tokenizer {pre}: '<|im_' -> {partial} (no special)")
        for text, pieces in expected_splits[pre].items():
            got = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
            check(got == pieces, f"tokenizer {pre}: pre-tokenize {text!r} -> {got}")
    plain = H.hf_tokenizer(vocab["tokens"], vocab["merges"], vocab["token_types"], "llama3", ignore_merges=False)
    ids["llama3 without ignore_merges"] = [e.ids for e in plain.encode_batch(texts, add_special_tokens=False)]
    for a, b in [("gpt2", "smollm"), ("smollm", "qwen2"), ("llama3", "qwen2"),
                 ("llama3", "llama3 without ignore_merges")]:
        n = sum(x != y for x, y in zip(ids[a], ids[b]))
        print(f"     {a} vs {b}: {n} of {len(texts)} strings tokenize differently")
    return ids


def logits(model, ids):
    import torch
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def check_random_models(tmp, texts, want_ids):
    """want_ids: pre-tokenizer -> token ids of texts (check_tokenizers)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer
    sample = "<|im_start|>user\nWhat is 17 times 3? I'm 12345 sure.<|im_end|>\n<|im_start|>assistant\n"
    runs = [(k, "float32") for k in H.RANDOM_KINDS] + [("llama", "bfloat16")]
    for kind, dtype in runs:
        name = f"{kind}/{dtype}"
        out = os.path.join(tmp, f"{kind}_{dtype}")
        model = H.random_model(kind, out, seed=1, dtype=dtype)
        files = sorted(os.listdir(out))
        check({"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(files),
              f"random {name}: files {files}")
        re_model = AutoModelForCausalLM.from_pretrained(out).eval()
        re_tok = AutoTokenizer.from_pretrained(out)
        pre = {"qwen2": "qwen2", "llama3_rope": "llama3"}.get(kind, "smollm")
        got = re_tok(texts, add_special_tokens=False).input_ids
        check(got == want_ids[pre], f"random {name}: {type(re_tok).__name__} from tokenizer.json = "
                                    f"hf_tokenizer {pre} on {len(texts)} strings")
        ids = re_tok(sample, add_special_tokens=False).input_ids
        check(ids[0] == 1 and ids.count(2) == 1 and len(ids) > 20, f"random {name}: sample prompt {len(ids)} ids")
        a, b = logits(model, ids), logits(re_model, ids)
        diff = float((a - b).abs().max())
        std = float(a.std(dim=-1).mean())
        check(diff == 0.0 and type(re_model) is type(model), f"random {name}: reloaded "
                                                             f"{type(re_model).__name__}, max |dlogit| {diff:.1e}")
        check(std > 0.3, f"random {name}: logit std {std:.2f} per position (not flat)")
        with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
            keys = set(f.keys())
            st_dtype = f.get_tensor("model.embed_tokens.weight").dtype
        check(str(st_dtype) == f"torch.{dtype}", f"random {name}: safetensors dtype {st_dtype}, {len(keys)} tensors")
        tied = re_model.lm_head.weight.data_ptr() == re_model.model.embed_tokens.weight.data_ptr()
        want_tied = kind == "llama_tied"
        check(tied == want_tied and ("lm_head.weight" in keys) != want_tied,
              f"random {name}: tied={tied}, lm_head.weight stored={'lm_head.weight' in keys}")
        if kind == "qwen2":
            biases = sorted(k.split(".")[-2] for k in keys if k.endswith("bias") and ".layers.0." in k)
            check(biases == ["k_proj", "q_proj", "v_proj"], f"random {name}: biases {biases}")
            check(re_tok.backend_tokenizer.normalizer is not None, f"random {name}: NFC normalizer kept")
        if kind == "llama3_rope":
            scaled = re_model.model.rotary_emb.inv_freq
            base = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
            ratio = (base / scaled).tolist()
            check(re_model.config.rope_scaling["rope_type"] == "llama3" and abs(ratio[0] - 1) < 1e-6
                  and abs(ratio[-1] - 8) < 1e-4 and 1 < ratio[1] < 8,
                  f"random {name}: inv_freq divided by {[round(r, 3) for r in ratio]}")
    for kind, why in H.UNSUPPORTED_KINDS.items():
        try:
            H.random_model(kind, os.path.join(tmp, kind))
            check(False, f"random {kind}: expected NotImplementedError")
        except NotImplementedError:
            print(f"skip {kind}: {why}")


def check_smollm2():
    import torch
    path = H.smollm2_gguf()
    cfg = H.gguf_llama_config(path)
    mine = H.gguf_state_dict(path, cfg.num_attention_heads, cfg.num_key_value_heads)
    theirs = H.transformers_gguf_checkpoint(path)
    same = set(mine) == set(theirs) and all(torch.equal(mine[k], theirs[k].float()) for k in mine)
    check(same, f"smollm2: {len(mine)} tensors equal to transformers' load_gguf_checkpoint (bit-exact)")
    del mine, theirs
    model, tok = H.load_smollm2_transformers(path)
    answer = H.greedy_answer(model, tok, "What is 17 times 3?")
    check("51" in answer, f"smollm2: greedy answer {answer!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smollm2", action="store_true", help="also load the 135M model (about 20 s)")
    ap.add_argument("--keep", action="store_true", help="keep the random checkpoints")
    args = ap.parse_args()
    H.require_smollm2()
    import torch
    torch.set_num_threads(min(2, torch.get_num_threads()))

    vocab = H.gguf_vocab(H.smollm2_gguf())
    check_vocab(vocab)
    texts = corpus()
    check(len(texts) >= 10000 and len(set(texts)) == len(texts) and texts == corpus(),
          f"corpus: {len(texts)} distinct strings, deterministic")
    sample = texts[::len(texts) // 200][:200]
    ids = check_tokenizers(vocab, sample)
    tmp = tempfile.mkdtemp(prefix="forge_hfref_")
    try:
        check_random_models(tmp, sample, ids)
    finally:
        if args.keep:
            print(f"     kept {tmp}")
        else:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    if args.smollm2:
        check_smollm2()
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
