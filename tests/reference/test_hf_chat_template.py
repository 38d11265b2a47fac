#!/usr/bin/env python3
"""forge's native chat formats against transformers' apply_chat_template.

Two templates, each the model's own Jinja source rendered by transformers
(jinja2) and tokenized with add_special_tokens=False, as apply_chat_template
does:
  chatml   SmolLM2-135M-Instruct's template (from its GGUF file; it adds a
           default system message when the first is not one)
  llama3   Llama 3's header template on the SmolLM2 vocabulary with Llama 3's
           special tokens added (<|begin_of_text|>, <|start_header_id|>,
           <|end_header_id|>, <|eot_id|>) and the llama3 pre-tokenizer
On 600 generated conversations per template (with and without a system
message; user, assistant and tool turns; assistant turns that are tool calls
<tool_call>{"name": ..., "arguments": ...}</tool_call>, answers, or empty;
leading and trailing white space; unicode; special-token text inside
content; with and without the generation prompt), forge's tokens must equal
the reference's. So must 202 prompts given as text (the gateway's
/completions) against tokenizer(text), Llama 3's BOS first, except that a
text that starts with BOS gets no second one.

  test_hf_chat_template.py --build-dir BUILD
Exit 77 (skip) without the reference packages or the model file.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref  # noqa: E402

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

WORDS = ["calc", "the", "answer", "is", "17", "times", "3", "Paris", "capital", "of", "find", "lookup", "x",
         "é", "日本", "🙂", "  ", "\t", "'s", "don't", "<|im_end|>", "<|eot_id|>", "42", "3.14"]


def text(rng, n):
    s = " ".join(rng.choice(WORDS) for _ in range(n))
    # Edges of white space, Unicode's too (Jinja's trim is str.strip()).
    if rng.random() < 0.2:
        s = rng.choice([" ", "\n", "  \n", "\t", "\u00a0", "\u3000 ", "\x1c"]) + s
    if rng.random() < 0.2:
        s = s + rng.choice([" ", "\n", "\n\n", "\u00a0", " \u2003", "\x1f"])
    return s


def tool_call(rng):
    args = {"input": text(rng, rng.randint(1, 3))}
    return "<tool_call>\n" + json.dumps({"name": rng.choice(["calc", "find", "lookup"]), "arguments": args}) + \
        "\n</tool_call>"


def conversation(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng, rng.randint(3, 12))})
    msgs.append({"role": "user", "content": text(rng, rng.randint(1, 15))})
    for _ in range(rng.randint(0, 4)):
        r = rng.random()
        content = tool_call(rng) if r < 0.5 else ("" if r < 0.55 else "answer(" + text(rng, 2) + ")")
        msgs.append({"role": "assistant", "content": content})
        msgs.append({"role": rng.choice(["tool", "tool", "user"]), "content": text(rng, rng.randint(0, 8))})
    if rng.random() < 0.3:
        msgs.append({"role": "assistant", "content": text(rng, 4)})
    return msgs


def llama3_folder(vocab, folder):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import AddedToken
    tok = ref.hf_tokenizer(vocab["tokens"], vocab["merges"], vocab["token_types"], "llama3")
    specials = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    # As Llama 3's tokenizer.json: BOS before every encoded text.
    from tokenizers import processors
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                   chat_template=LLAMA3_TEMPLATE, clean_up_tokenization_spaces=False)
    fast.save_pretrained(folder)
    return fast


def compare(name, dump, command, path, inputs, want, describe):
    """forge_hf_dump COMMAND PATH on the inputs (a JSON line each) against
    the reference's token ids: the number that differ, the first three shown."""
    p = subprocess.run([dump, command, path], input="".join(json.dumps(x) + "\n" for x in inputs),
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"forge_hf_dump {command} failed: {p.stderr.strip()}")
    got = [json.loads(x) for x in p.stdout.split("\n") if x]
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    for i in bad[:3]:
        print(f"  {describe(i)}\n    forge {got[i][:60]}\n    hf    {want[i][:60]}")
    print(f"{name}: {command}: {len(bad)} of {len(want)} differ")
    return len(bad) + (len(got) != len(want))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--n", type=int, default=600)
    args = ap.parse_args()
    gguf = ref.require_smollm2()
    try:
        import jinja2  # noqa: F401
    except ImportError:
        ref.skip("jinja2 is not installed with the reference packages (transformers renders templates with it)")
    dump = os.path.join(args.build_dir, "tests", "forge_hf_dump")
    vocab = ref.gguf_vocab(gguf)
    rng = random.Random(11)
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        cases = [("chatml (SmolLM2)", gguf, ref.fast_tokenizer(vocab)),
                 ("llama3", os.path.join(work, "llama3"), None)]
        cases[1] = (cases[1][0], cases[1][1], llama3_folder(vocab, cases[1][1]))
        for name, path, tok in cases:
            convs = [(conversation(rng), rng.random() < 0.7) for _ in range(args.n)]
            want = [tok.apply_chat_template(m, tokenize=True, add_generation_prompt=g) for m, g in convs]
            failures += compare(name, dump, "chat", path, [{"messages": m, "add_generation_prompt": g} for m, g in convs],
                                want, lambda i: f"{name}: conversation {i}: {convs[i][0]!r}")
            # A prompt given as text (the gateway's /completions): tokenizer(text),
            # with what the post_processor writes before it (Llama 3's BOS).
            texts = [text(rng, rng.randint(0, 12)) for _ in range(200)] + ["<|begin_of_text|>hi", ""]
            want = [tok(t)["input_ids"] for t in texts]
            want[-2] = tok("<|begin_of_text|>hi", add_special_tokens=False)["input_ids"]  # forge adds no second BOS
            failures += compare(name, dump, "prompt", path, texts, want, lambda i: f"{name}: prompt {texts[i]!r}")
    if failures:
        print(f"FAIL: {failures} conversations or prompts differ")
        return 1
    print("OK: forge renders every conversation as apply_chat_template does, and every text prompt as tokenizer(text)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
