#!/usr/bin/env python3
"""forge's pretrained models against Hugging Face transformers (FP32, CPU).

Cases (--case, repeatable; default all):
  smollm2      SmolLM2-135M-Instruct from its GGUF file (Q4_1/Q8_0 tensors
               dequantized by forge; transformers loads the same file with
               gguf.quants, hf_reference.load_smollm2_transformers)
  llama, llama_tied, llama3_rope, qwen2
               small random checkpoints that transformers writes as Hugging
               Face folders (hf_reference.random_model): untied and tied
               embeddings, Llama 3 RoPE scaling, Qwen2's q/k/v bias
  export       forge export-model of the SmolLM2 GGUF and of the random
               qwen2 folder: transformers loads the written folder and gives
               forge's logits; forge reads it back to the same weights. Then
               a fine-tune: forge sft (agent demonstrations, 4 steps) from the
               random qwen2 folder, export-model of its checkpoint; the
               weights moved, and transformers on the export gives the
               checkpoint's logits (forge_hf_dump reads the .h5)

For each model: the logits of every position of three sequences (a ChatML
prompt, random tokens, text) within 1e-4 relative (Frobenius norm of the
difference over the reference's), and the same 64 greedy tokens after a
prompt (forge's rollout engine, transformers' generate with no stop token).
Exit 77 (skip) without the reference packages or the model file.

  test_hf_oracle.py --build-dir BUILD [--case NAME ...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref  # noqa: E402

TOLERANCE = 1e-4
GREEDY = 64


def run(cmd, stdin=""):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout


def sequences(tok, vocab_size):
    import random
    rng = random.Random(7)
    chat = tok.encode("<|im_start|>system\nYou are a careful calculator.<|im_end|>\n<|im_start|>user\n"
                      "What is 17 times 3? Use calc(a op b).<|im_end|>\n<|im_start|>assistant\n",
                      add_special_tokens=False)
    text = tok.encode("The quick brown fox jumps over the lazy dog. " * 6 + "def f(x):\n    return x * 2\n",
                      add_special_tokens=False)
    noise = [rng.randrange(vocab_size) for _ in range(150)]
    return [chat, noise, text]


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def hf_greedy(model, ids, n):
    import torch
    model.generation_config.eos_token_id = None  # n tokens, like forge's engine without a stop token
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(ids):].tolist()


def compare(name, dump, path, model, tok, workdir):
    import numpy as np
    seqs = sequences(tok, model.config.vocab_size)
    outdir = tempfile.mkdtemp(dir=workdir)
    run([dump, "logits", path, outdir], "".join(json.dumps(s) + "\n" for s in seqs))
    failures = 0
    for i, s in enumerate(seqs):
        got = np.load(os.path.join(outdir, f"logits_{i}.npy"))
        want = hf_logits(model, s)
        rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        worst = float(np.abs(got - want).max())
        ok = rel <= TOLERANCE and got.shape == want.shape
        failures += not ok
        print(f"  {name}: logits of sequence {i} ({len(s)} tokens): rel {rel:.2e}, max |diff| {worst:.2e} "
              f"{'ok' if ok else 'FAIL'}")
    prompt = seqs[0]
    got = json.loads(run([dump, "generate", path, str(GREEDY)], json.dumps(prompt) + "\n"))
    want = hf_greedy(model, prompt, GREEDY)
    same = got == want
    failures += not same
    first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), None)
    print(f"  {name}: {GREEDY} greedy tokens {'equal' if same else f'differ from position {first}'}"
          f"{'' if same else f' (forge {got[first:first + 5]}, hf {want[first:first + 5]})'}")
    return failures


def fine_tuned_export(forge, dump, source, work):
    """forge sft from a Hugging Face folder, then export-model of the checkpoint."""
    import numpy as np
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    run_dir = os.path.join(work, "finetune")
    run([forge, "sft", f"--model.pretrained={source}", "--sft.task=agent", "--sft.steps=4", "--sft.batch=2",
         "--sft.eval_requests=1", "--optim.lr=3e-3", "--optim.warmup_steps=0", f"--run.dir={run_dir}",
         "--run.checkpoint_every=4"])
    import glob
    found = sorted(glob.glob(os.path.join(run_dir, "**", "ckpt_step_00000004.h5"), recursive=True))
    if not found:
        print(f"  FAIL fine-tune: no step-4 checkpoint under {run_dir}")
        return 1
    checkpoint = found[0]
    out = os.path.join(work, "export_finetuned")
    print("  " + run([forge, "export-model", run_dir, "--out", out]).strip())
    before = load_file(os.path.join(source, "model.safetensors"))
    after = load_file(os.path.join(out, "model.safetensors"))
    moved = max(float(np.abs(after[k].astype(np.float64) - before[k].astype(np.float64)).max()) for k in before)
    failures = 0
    if moved < 1e-4:
        print(f"  FAIL fine-tune: the exported weights equal the starting ones (max change {moved:.2e})")
        failures += 1
    exported = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    failures += compare("export of a fine-tuned checkpoint", dump, checkpoint, exported,
                        AutoTokenizer.from_pretrained(out), work)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--case", action="append", choices=("smollm2",) + ref.RANDOM_KINDS + ("export",))
    args = ap.parse_args()
    cases = args.case or (["smollm2"] + list(ref.RANDOM_KINDS) + ["export"])
    # The random-model cases need the reference packages only, not SmolLM2.
    gguf = ref.require_smollm2() if set(cases) - set(ref.RANDOM_KINDS) else ref.require_reference()
    import torch
    # The thread count CTest gives every test (OMP_NUM_THREADS), not every core beside a parallel test.
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", 0)) or os.cpu_count() or 1))
    dump = os.path.join(args.build_dir, "tests", "forge_hf_dump")
    forge = os.path.join(args.build_dir, "forge")
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        smol = None
        for case in cases:
            if case == "smollm2":
                smol = smol or ref.load_smollm2_transformers()
                failures += compare("smollm2 (gguf)", dump, gguf, smol[0], smol[1], work)
            elif case in ref.RANDOM_KINDS:
                folder = os.path.join(work, case)
                model = ref.random_model(case, folder)
                from transformers import AutoTokenizer
                failures += compare(case, dump, folder, model, AutoTokenizer.from_pretrained(folder), work)
            else:
                from transformers import AutoModelForCausalLM, AutoTokenizer
                smol = smol or ref.load_smollm2_transformers()
                qwen = os.path.join(work, "qwen2_source")
                ref.random_model("qwen2", qwen)
                for label, source in (("smollm2", gguf), ("qwen2", qwen)):
                    out = os.path.join(work, f"export_{label}")
                    print("  " + run([forge, "export-model", source, "--out", out]).strip())
                    exported = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
                    failures += compare(f"export of {label}", dump, source, exported,
                                        AutoTokenizer.from_pretrained(out), work)
                    # forge reads its own export back to the same logits.
                    failures += compare(f"forge reading its export of {label}", dump, out, exported,
                                        AutoTokenizer.from_pretrained(out), work)
                failures += fine_tuned_export(forge, dump, qwen, work)
    if failures:
        print(f"FAIL: {failures} checks")
        return 1
    print("OK: every logit within 1e-4 relative and every greedy continuation equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
