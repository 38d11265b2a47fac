#!/usr/bin/env python3
"""Hugging Face reference implementations for forge's pretrained-model tests.

A small library for test scripts (run with Debian's /usr/bin/python3). The
reference packages (transformers 4.44.2, tokenizers 0.19.1, gguf 0.10.0, ...)
live in <cache>/pyref, installed with `pip install --target`; they are not on
the default path, so require_reference() puts them there. <cache> is
$FORGE_CACHE if set, else ~/.cache/forge.

  cache_dir(), pyref_dir(), smollm2_gguf()   the paths above
  require_reference(), require_smollm2()     print "SKIP: <reason>", exit 77 if absent
  gguf_vocab(path)                           tokenizer metadata of a GGUF file
  hf_tokenizer(tokens, merges, types, pre)   a tokenizers.Tokenizer (byte-level BPE)
  load_smollm2_transformers()                SmolLM2-135M-Instruct Q4_1 GGUF as a float32
                                             LlamaForCausalLM + tokenizer
  random_model(kind, out_dir, seed)          a small random HF checkpoint folder
  forge_cache_env()                          environment for subprocesses

GGUF Q/K rows. convert_hf_to_gguf.py permutes the rows of every llama attn_q /
attn_k weight so that llama.cpp can rotate adjacent pairs (2i, 2i+1); the HF
layout rotates pairs (i, i + head_dim/2) (rotate_half). Per head h with
head_dim hd (n = n_heads for Q, n_kv_heads for K):

  gguf[h*hd + 2*i + j] = hf[h*hd + j*hd/2 + i]      i < hd/2, j in {0, 1}

transformers undoes it with reverse_permute_weights (reshape the rows to
[n, hd/2, 2], swap those two inner axes); unpermute_qk() below is the same
operation. Qwen2 GGUFs are not permuted (llama.cpp uses NeoX RoPE for them).

`python3 hf_reference.py` loads SmolLM2 and prints its greedy answer to
"What is 17 times 3?".
"""
import os
import sys

SKIP_CODE = 77  # CTest's SKIP_RETURN_CODE

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
PRE_TOKENIZERS = ("gpt2", "smollm", "llama3", "qwen2")

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


# ---------------------------------------------------------------- paths / skip

def cache_dir():
    return os.environ.get("FORGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "forge")


def pyref_dir():
    return os.path.join(cache_dir(), "pyref")


def smollm2_gguf():
    return os.path.join(cache_dir(), "models", SMOLLM2_FILE)


def skip(reason):
    """Print one SKIP line and exit with CTest's skip code."""
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP_CODE)


def _add_pyref_path():
    d = pyref_dir()
    if d not in sys.path:
        sys.path.insert(0, d)  # ahead of any system-wide transformers
    # Everything is local; never wait on the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader progress bar


def require_reference():
    """Make the reference packages importable, or skip (exit 77)."""
    if not os.path.isdir(pyref_dir()):
        skip(f"reference packages not installed ({pyref_dir()} missing)")
    _add_pyref_path()
    try:
        import gguf  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        skip(f"cannot import reference packages from {pyref_dir()}: {type(e).__name__}: {e}")


def require_smollm2():
    """require_reference(), and skip unless the SmolLM2 GGUF is present."""
    require_reference()
    if not os.path.isfile(smollm2_gguf()):
        skip(f"test model not found ({smollm2_gguf()})")
    return smollm2_gguf()


def forge_cache_env(base=None):
    """A copy of `base` (default os.environ) for subprocess env=: PYTHONPATH
    starts with pyref, FORGE_CACHE names the cache, Hugging Face stays offline."""
    env = dict(os.environ if base is None else base)
    parts = [pyref_dir()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["FORGE_CACHE"] = cache_dir()
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


# ---------------------------------------------------------------- GGUF metadata

def _field(reader, key, default=None):
    """A GGUF metadata value: str, int/float/bool, or a list of those."""
    import gguf
    f = reader.fields.get(key)
    if f is None:
        return default
    T = gguf.GGUFValueType
    item_type = f.types[-1]

    def one(part):
        if item_type == T.STRING:
            return bytes(part).decode("utf-8")
        v = part.tolist()[0]
        return bool(v) if item_type == T.BOOL else v

    values = [one(f.parts[i]) for i in f.data]
    return values if f.types[0] == T.ARRAY else values[0]


def gguf_vocab(path):
    """Tokenizer metadata of a GGUF file, as a dict:
    tokens [str], merges [str "a b"], token_types [int], bos_id, eos_id,
    unk_id, pad_id (int or None), chat_template (str or None), model
    (tokenizer.ggml.model, e.g. "gpt2"), pre (tokenizer.ggml.pre, e.g. "smollm"),
    add_bos (bool or None)."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    return {
        "tokens": _field(r, "tokenizer.ggml.tokens"),
        "merges": _field(r, "tokenizer.ggml.merges", []),
        "token_types": _field(r, "tokenizer.ggml.token_type"),
        "bos_id": _field(r, "tokenizer.ggml.bos_token_id"),
        "eos_id": _field(r, "tokenizer.ggml.eos_token_id"),
        "unk_id": _field(r, "tokenizer.ggml.unknown_token_id"),
        "pad_id": _field(r, "tokenizer.ggml.padding_token_id"),
        "chat_template": _field(r, "tokenizer.chat_template"),
        "model": _field(r, "tokenizer.ggml.model"),
        "pre": _field(r, "tokenizer.ggml.pre"),
        "add_bos": _field(r, "tokenizer.ggml.add_bos_token"),
    }


# ---------------------------------------------------------------- tokenizer

def hf_tokenizer(tokens, merges, token_types, pre, nfc=None, ignore_merges=None):
    """A byte-level BPE tokenizers.Tokenizer like the model families' tokenizer.json:

      model    BPE(vocab = tokens by id, merges), no unk, byte_fallback False
               (a byte whose symbol is not in the vocab is silently dropped)
      specials every token with token_type 3 (control), special AddedToken,
               normalized=False
      decoder  ByteLevel
      pre      "gpt2":   ByteLevel(add_prefix_space=False, use_regex=True)
               "smollm": Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]
               "llama3": Sequence[Split(LLAMA3_PATTERN, isolated), ByteLevel(use_regex=False)]
               "qwen2":  the same with \\p{N} for \\p{N}{1,3}
      nfc      NFC normalizer; None = as the family's tokenizer.json does
               (only Qwen2 normalizes; llama.cpp never does)
      ignore_merges  a pre-token that is itself a vocabulary token is emitted
               whole, before any merge; None = as the family does (Llama 3's
               tokenizer.json sets it, and llama.cpp for "llama-bpe")

    Only offsets differ from the real files: Qwen2 writes ByteLevel
    trim_offsets false, which tokenizers 0.19's Python API cannot set.

    No post-processor: nothing is added around the text (Llama 3's own file
    adds <|begin_of_text|>; encode with add_special_tokens=False to compare).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError("duplicate token strings in the vocabulary")
    pairs = []
    for m in merges:
        a, b = m.split(" ")  # byte-level symbols never contain a space
        pairs.append((a, b))
    if ignore_merges is None:
        ignore_merges = pre == "llama3"
    tok = Tokenizer(BPE(vocab, pairs, unk_token=None, fuse_unk=False, byte_fallback=False,
                        ignore_merges=ignore_merges))

    if pre == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif pre in ("llama3", "qwen2"):
        pattern = LLAMA3_PATTERN if pre == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        raise ValueError(f"unknown pre-tokenizer {pre!r} (one of {PRE_TOKENIZERS})")
    if nfc if nfc is not None else pre == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(token_types) if t == 3])
    return tok


def fast_tokenizer(vocab, pre=None, nfc=None, ignore_merges=None):
    """A transformers PreTrainedTokenizerFast around hf_tokenizer() for a
    gguf_vocab() dict, with its bos/eos/unk/pad tokens and chat template (what
    save_pretrained writes as tokenizer.json + tokenizer_config.json)."""
    from transformers import PreTrainedTokenizerFast
    toks = vocab["tokens"]

    def name(i):
        return toks[i] if i is not None else None

    tok = hf_tokenizer(toks, vocab["merges"], vocab["token_types"], pre or vocab["pre"], nfc, ignore_merges)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=name(vocab["bos_id"]), eos_token=name(vocab["eos_id"]),
        unk_token=name(vocab["unk_id"]), pad_token=name(vocab["pad_id"]),
        chat_template=vocab["chat_template"], clean_up_tokenization_spaces=False,
        model_max_length=8192)


# ---------------------------------------------------------------- SmolLM2 GGUF -> transformers

def unpermute_qk(w, n_heads):
    """GGUF llama Q/K rows -> HF rows: per head, row 2i+j -> row j*hd/2+i."""
    rows = w.shape[0]
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _hf_name(gguf_name):
    """GGUF tensor name -> transformers llama/qwen2 parameter name."""
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if gguf_name in fixed:
        return fixed[gguf_name]
    blk, layer, part, kind = gguf_name.split(".")  # blk.N.attn_q.weight
    sub = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
           "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj"}[part]
    assert blk == "blk"
    return f"model.layers.{layer}.{sub}.{kind}"


def _f32(x):
    """A float32 metadata value as the decimal it was written from (1e-05, not 9.9999997e-06)."""
    return float(f"{x:.7g}")


def gguf_llama_config(path):
    """LlamaConfig from a llama GGUF's metadata (float32, tied iff no output.weight)."""
    from gguf import GGUFReader
    from transformers import LlamaConfig
    r = GGUFReader(path)
    arch = _field(r, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}, expected llama")

    def a(key, default=None):
        return _field(r, f"llama.{key}", default)

    n_heads, d = a("attention.head_count"), a("embedding_length")
    if a("rope.dimension_count", d // n_heads) != d // n_heads:
        raise ValueError("partial RoPE is not supported")
    if a("rope.scaling.type") not in (None, "none"):
        raise ValueError("GGUF rope scaling is not handled here")
    vocab = a("vocab_size") or len(_field(r, "tokenizer.ggml.tokens"))
    return LlamaConfig(
        vocab_size=vocab, hidden_size=d, intermediate_size=a("feed_forward_length"),
        num_hidden_layers=a("block_count"), num_attention_heads=n_heads,
        num_key_value_heads=a("attention.head_count_kv", n_heads),
        max_position_embeddings=a("context_length"),
        rms_norm_eps=_f32(a("attention.layer_norm_rms_epsilon")), rope_theta=_f32(a("rope.freq_base", 10000.0)),
        tie_word_embeddings=not any(t.name == "output.weight" for t in r.tensors),
        bos_token_id=_field(r, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(r, "tokenizer.ggml.eos_token_id"),
        pad_token_id=_field(r, "tokenizer.ggml.padding_token_id"),
        torch_dtype="float32")


def gguf_state_dict(path, n_heads, n_kv_heads):
    """{HF name: float32 torch tensor} of a llama GGUF: every tensor dequantized
    with gguf.quants.dequantize (F32, F16, Q4_0, Q4_1, Q8_0, K-quants, ...),
    Q/K rows un-permuted (unpermute_qk)."""
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    sd = {}
    for t in GGUFReader(path).tensors:
        w = dequantize(t.data, t.tensor_type).reshape(tuple(int(x) for x in reversed(t.shape)))
        if ".attn_q." in t.name:
            w = unpermute_qk(w, n_heads)
        elif ".attn_k." in t.name:
            w = unpermute_qk(w, n_kv_heads)
        sd[_hf_name(t.name)] = torch.from_numpy(np.array(w, dtype=np.float32, order="C"))  # copy off the memmap
    return sd


def load_smollm2_transformers(path=None):
    """(model, tokenizer): the SmolLM2 GGUF as a float32 LlamaForCausalLM in
    eval mode, lm_head tied to the embedding, and a PreTrainedTokenizerFast
    (fast_tokenizer: "smollm" pre-tokenizer, ChatML template, bos <|im_start|>,
    eos/pad <|im_end|>).

    transformers 4.44.2 loads llama GGUFs itself (from_pretrained(gguf_file=))
    but refuses Q4_1 (ggml type 3) and leaves lm_head untied and random; so the
    state dict is built here (gguf_state_dict) with the same name mapping and
    Q/K un-permutation. (Its GGUF tokenizer converter is also off for this file:
    no Digits split, byte_fallback BPE, and it swaps bos/eos.)"""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.modeling_utils import no_init_weights
    path = path or smollm2_gguf()
    config = gguf_llama_config(path)
    sd = gguf_state_dict(path, config.num_attention_heads, config.num_key_value_heads)
    with no_init_weights():
        model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    allowed = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - allowed or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    if config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model = model.to(torch.float32).eval()
    return model, fast_tokenizer(gguf_vocab(path))


def transformers_gguf_checkpoint(path=None):
    """transformers' own GGUF loader (load_gguf_checkpoint: its name mapping and
    reverse_permute_weights), with gguf.quants.dequantize for the ggml types it
    refuses. Returns {HF name: tensor}; an independent check of gguf_state_dict."""
    import gguf.quants
    import transformers.modeling_gguf_pytorch_utils as mg
    path = path or smollm2_gguf()
    original = mg.load_dequant_gguf_tensor

    def dequant(shape, ggml_type, data, n_bytes):
        try:
            return original(shape=shape, ggml_type=ggml_type, data=data, n_bytes=n_bytes)
        except NotImplementedError:
            return gguf.quants.dequantize(data, ggml_type).reshape(shape[::-1])

    mg.load_dequant_gguf_tensor = dequant
    try:
        return mg.load_gguf_checkpoint(path, return_tensors=True)["tensors"]
    finally:
        mg.load_dequant_gguf_tensor = original


def render_chatml(messages, add_generation_prompt=True, default_system=None):
    """ChatML in plain Python, as SmolLM2's template renders it: a system turn
    with default_system first unless messages start with one, then
    "<|im_start|>{role}\\n{content}<|im_end|>\\n" per message, then
    "<|im_start|>assistant\\n" if add_generation_prompt."""
    out = []
    if default_system is not None and (not messages or messages[0]["role"] != "system"):
        out.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
    for m in messages:
        out.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def chat_prompt(tokenizer, user_message):
    """One user turn plus the assistant header, rendered by the tokenizer's chat
    template. transformers needs jinja2 for that, which pyref may lack; then a
    ChatML template is rendered by render_chatml (its default system prompt
    taken from the template text)."""
    messages = [{"role": "user", "content": user_message}]
    try:
        import jinja2  # noqa: F401
    except ImportError:
        import re
        template = tokenizer.chat_template or ""
        if "<|im_start|>" not in template:
            raise
        m = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", template, re.S)
        return render_chatml(messages, True, m.group(1) if m else None)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def greedy_answer(model, tokenizer, user_message, max_new_tokens=48):
    """Greedy completion of a one-turn chat, up to <|im_end|>, as text."""
    import torch
    ids = tokenizer(chat_prompt(tokenizer, user_message), return_tensors="pt",
                    add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


# ---------------------------------------------------------------- random checkpoints

RANDOM_KINDS = ("llama", "llama_tied", "llama3_rope", "qwen2")
UNSUPPORTED_KINDS = {
    "llama_headdim": "transformers 4.44.2's LlamaAttention derives head_dim = hidden_size // "
                     "num_attention_heads and ignores a head_dim config key (added in 4.45)",
}


def random_model(kind, out_dir, seed=0, dtype="float32"):
    """Write a small random Hugging Face checkpoint to out_dir: config.json,
    generation_config.json, model.safetensors (save_pretrained,
    safe_serialization=True; dtype "float32", "bfloat16" or "float16") and the
    tokenizer files (tokenizer.json, tokenizer_config.json,
    special_tokens_map.json). Returns the model (float32, eval mode, the
    weights as written).

    Every kind uses the SmolLM2 vocabulary (49152 tokens, ChatML template,
    bos <|im_start|>=1, eos/pad <|im_end|>=2), so the SmolLM2 GGUF must exist.
    Common dims: hidden 64, 2 layers, 4 heads, 2 KV heads (head_dim 16),
    intermediate 128, rms_norm_eps 1e-5, rope_theta 10000, max positions 512.

      llama        LlamaForCausalLM, untied lm_head; "smollm" tokenizer
      llama_tied   the same with tie_word_embeddings=True (model.safetensors
                   then holds only model.embed_tokens.weight)
      llama3_rope  llama + rope_scaling {rope_type llama3, factor 8,
                   low_freq_factor 1, high_freq_factor 4,
                   original_max_position_embeddings 64}; with head_dim 16 the
                   wavelengths 2*pi*10000^(i/8) put frequency 0 in the kept band,
                   1-2 in the smoothed band (16..64) and 3-7 in the scaled band;
                   "llama3" tokenizer (Split regex + ByteLevel, ignore_merges)
      qwen2        Qwen2ForCausalLM (bias on q, k, v), untied, no sliding window,
                   Qwen2's own rms_norm_eps 1e-6 and rope_theta 1e6 (forge's
                   defaults are 1e-5 and 10000: a reader that ignored either
                   passed every other case); "qwen2" tokenizer (NFC + Split
                   regex + ByteLevel)
      llama_headdim  not supported by transformers 4.44.2 (UNSUPPORTED_KINDS):
                   raises NotImplementedError

    Initialisation (torch.manual_seed(seed)): matrices N(0, 0.08^2), embedding
    and lm_head N(0, 0.1^2), biases N(0, 0.05^2), norm weights 1 + N(0, 0.1^2),
    so the logits are far from flat.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    if kind in UNSUPPORTED_KINDS:
        raise NotImplementedError(f"{kind}: {UNSUPPORTED_KINDS[kind]}")
    if kind not in RANDOM_KINDS:
        raise ValueError(f"unknown kind {kind!r} (one of {RANDOM_KINDS})")
    vocab = gguf_vocab(smollm2_gguf())
    common = dict(vocab_size=len(vocab["tokens"]), hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
                  tie_word_embeddings=(kind == "llama_tied"), bos_token_id=vocab["bos_id"],
                  eos_token_id=vocab["eos_id"], pad_token_id=vocab["pad_id"], torch_dtype=dtype)
    if kind == "qwen2":
        common.update(rms_norm_eps=1e-6, rope_theta=1e6)
        config, cls, pre = Qwen2Config(use_sliding_window=False, **common), Qwen2ForCausalLM, "qwen2"
    elif kind == "llama3_rope":
        config = LlamaConfig(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                             **common)
        cls, pre = LlamaForCausalLM, "llama3"
    else:
        config, cls, pre = LlamaConfig(**common), LlamaForCausalLM, "smollm"

    torch.manual_seed(seed)
    model = cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied lm_head is not listed again
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
            elif "embed_tokens" in name or name.startswith("lm_head"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    model.eval()
    os.makedirs(out_dir, exist_ok=True)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    buffers = {n: b.clone() for n, b in model.named_buffers()}  # RoPE inv_freq, kept in float32
    model.to(torch_dtype)  # the returned model keeps the rounded weights
    model.save_pretrained(out_dir, safe_serialization=True)
    model.to(torch.float32)
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(buffers[n])
    fast_tokenizer(vocab, pre=pre).save_pretrained(out_dir)
    return model


# ---------------------------------------------------------------- sanity check

def main():
    require_smollm2()
    model, tok = load_smollm2_transformers()
    question = "What is 17 times 3?"
    print(f"prompt: {chat_prompt(tok, question)!r}")
    print(f"answer: {greedy_answer(model, tok, question)!r}")


if __name__ == "__main__":
    main()
