"""forge's policy model written again in PyTorch, as an independent oracle.

Straightforward dense code, no blocking, no online softmax, no hand-written
backward: autograd differentiates it. Conventions follow src/model:

  x_0 = embed[token]
  per layer:  h = RMSNorm(x) ; [q k v] = h Wqkv^T (+ bqkv)  (rows: q heads, k heads, v heads;
                                                              the bias with qkv_bias)
              q, k = RoPE(q, k; position)                   (pairs (2i, 2i+1),
                                                              angle = pos * inv_freq[i],
                                                              inv_freq[i] = base^(-2i/head_dim),
                                                              rescaled per Llama 3's rope_scaling
                                                              when set: llama3_inv_freq)
              x = x + Attention(q, k, v; tree mask) Wo^T   (scale 1/sqrt(head_dim); query
                                                              head h reads kv head h // group)
              h = RMSNorm(x) ; [g u] = h Wgu^T ; x = x + (silu(g) * u) Wdown^T
  h_f = RMSNorm(x_L) on the head rows ; z = (h_f W_head^T) * inv_temperature
                                                             (W_head = embed when tied)
  logprob_e = log_softmax(z)[row_e, target_e] ; entropy_r = -sum p log p

RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w. Tree mask: query i sees key j iff
j <= i < subtree_end[j], built as an explicit dense [T, T] boolean matrix.

The model runs in float64 by default (dtype=torch.float32 selectable).
"""
import json
import math
import os

import numpy as np
import torch


class Config:
    def __init__(self, d):
        self.vocab = int(d["vocab"])
        self.d_model = int(d["d_model"])
        self.n_layers = int(d["n_layers"])
        self.n_heads = int(d["n_heads"])
        self.n_kv_heads = int(d["n_kv_heads"])
        self.ffn_dim = int(d["ffn_dim"])
        self.rope_base = float(d["rope_base"])
        self.norm_eps = float(d["norm_eps"])
        self.head_dim = int(d.get("head_dim", self.d_model // self.n_heads))
        self.tied_embeddings = bool(d.get("tied_embeddings", False))
        self.qkv_bias = bool(d.get("qkv_bias", False))
        self.rope_scaling = d.get("rope_scaling", {"factor": 0})


def llama3_inv_freq(inv_freq, scaling):
    """Llama 3's rope_scaling, written from its definition (transformers'
    _compute_llama3_parameters): wavelengths 2 pi / f above original_max /
    low_freq_factor are divided by factor, those below original_max /
    high_freq_factor kept, the band between interpolated by
    s = (original_max / wavelength - low) / (high - low)."""
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    original = float(scaling["original_max_positions"])
    out = []
    for f in inv_freq.tolist():
        wavelength = 2 * math.pi / f
        if wavelength < original / high:
            out.append(f)
        elif wavelength > original / low:
            out.append(f / factor)
        else:
            s = (original / wavelength - low) / (high - low)
            out.append((1 - s) * f / factor + s * f)
    return torch.tensor(out, dtype=torch.float64)


def tree_mask(subtree_end):
    """[T, T] bool: mask[i, j] = (j <= i) and (i < subtree_end[j])."""
    se = torch.as_tensor(np.asarray(subtree_end), dtype=torch.long)
    T = se.shape[0]
    i = torch.arange(T).unsqueeze(1)
    j = torch.arange(T).unsqueeze(0)
    return (j <= i) & (i < se.unsqueeze(0))


def rope(x, position, base, scaling=None):
    """x [T, heads, hd]: rotate pairs (2i, 2i+1) by pos * inv_freq[i], inv_freq[i] =
    base^(-2i/hd) (rescaled when `scaling` has a factor); angles in float64."""
    hd = x.shape[-1]
    pos = torch.as_tensor(np.asarray(position), dtype=torch.float64)
    inv_freq = base ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64) / hd)
    if scaling and float(scaling.get("factor", 0)) > 0:
        inv_freq = llama3_inv_freq(inv_freq, scaling)
    ang = pos[:, None] * inv_freq[None, :]  # [T, hd/2]
    cos = torch.cos(ang).to(x.dtype)[:, None, :]
    sin = torch.sin(ang).to(x.dtype)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return out.reshape(x.shape)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


class TorchPolicy:
    def __init__(self, config, params, dtype=torch.float64):
        """params: dict name -> numpy array (forge's ParamLayout names)."""
        self.cfg = config
        self.dtype = dtype
        self.names = list(params.keys())
        self.params = {
            n: torch.tensor(np.asarray(v), dtype=dtype).requires_grad_(True) for n, v in params.items()
        }

    @classmethod
    def from_dump(cls, dump_dir, dtype=torch.float64):
        manifest = load_manifest(dump_dir)
        params = {}
        for p in manifest["params"]:
            a = np.load(os.path.join(dump_dir, "params", p["name"] + ".npy"))
            assert list(a.shape) == list(p["shape"]), p["name"]
            params[p["name"]] = a
        return cls(Config(manifest["config"]), params, dtype)

    def zero_grad(self):
        for p in self.params.values():
            p.grad = None

    def grads(self):
        return {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in self.params.items()}

    def hidden(self, token, position, subtree_end, params=None):
        """Final residual stream x_L [T, d] of one bin."""
        c = self.cfg
        P = self.params if params is None else params
        tok = torch.as_tensor(np.asarray(token), dtype=torch.long)
        T = tok.shape[0]
        H, Hkv, hd = c.n_heads, c.n_kv_heads, c.head_dim
        group = H // Hkv
        mask = tree_mask(subtree_end)
        x = P["embed"][tok]
        for l in range(c.n_layers):
            pre = "layers.%d." % l
            h = rmsnorm(x, P[pre + "attn_norm"], c.norm_eps)
            qkv = h @ P[pre + "wqkv"].T
            if c.qkv_bias:
                qkv = qkv + P[pre + "bqkv"]
            q = qkv[:, : H * hd].reshape(T, H, hd)
            k = qkv[:, H * hd : (H + Hkv) * hd].reshape(T, Hkv, hd)
            v = qkv[:, (H + Hkv) * hd :].reshape(T, Hkv, hd)
            q = rope(q, position, c.rope_base, c.rope_scaling)
            k = rope(k, position, c.rope_base, c.rope_scaling)
            k = k.repeat_interleave(group, dim=1)  # query head h -> kv head h // group
            v = v.repeat_interleave(group, dim=1)
            s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd)
            s = s.masked_fill(~mask.unsqueeze(0), float("-inf"))
            a = torch.softmax(s, dim=-1)
            o = torch.einsum("hij,jhd->ihd", a, v).reshape(T, H * hd)
            x = x + o @ P[pre + "wo"].T
            h = rmsnorm(x, P[pre + "mlp_norm"], c.norm_eps)
            gu = h @ P[pre + "w_gate_up"].T
            g, u = gu[:, : c.ffn_dim], gu[:, c.ffn_dim :]
            x = x + (torch.nn.functional.silu(g) * u) @ P[pre + "w_down"].T
        return x

    def head(self, x, head_row, row_begin, target, inv_temperature, params=None):
        """(logits z [R, V] with the temperature applied, logprob [E], entropy [R])."""
        c = self.cfg
        P = self.params if params is None else params
        rows = torch.as_tensor(np.asarray(head_row), dtype=torch.long)
        hf = rmsnorm(x[rows], P["final_norm"], c.norm_eps)
        z = (hf @ P["embed" if c.tied_embeddings else "lm_head"].T) * inv_temperature
        logp = torch.log_softmax(z, dim=-1)
        entropy = -(logp.exp() * logp).sum(dim=-1)
        rb = np.asarray(row_begin)
        entry_row = torch.as_tensor(np.repeat(np.arange(len(rb) - 1), np.diff(rb)), dtype=torch.long)
        tgt = torch.as_tensor(np.asarray(target), dtype=torch.long)
        logprob = logp[entry_row, tgt]
        return z, logprob, entropy

    def bin_forward(self, b, inv_temperature, params=None, weights=None):
        """b: dict of a dumped bin's arrays; loss = -sum_e w_e logprob_e with w =
        weights if given, else b["weights"]. Returns (z, logprob, entropy, loss)."""
        x = self.hidden(b["token"], b["position"], b["subtree_end"], params)
        z, logprob, entropy = self.head(x, b["head_row"], b["row_begin"], b["target"], inv_temperature, params)
        w = torch.as_tensor(np.asarray(b["weights"] if weights is None else weights), dtype=self.dtype)
        loss = -(w * logprob).sum()
        return z, logprob, entropy, loss

    def sequence_logprobs(self, tokens, inv_temperature, params=None):
        """Linear (unmerged) causal pass over one sample: logprob of tokens[p]
        given tokens[:p], for p = 1..n-1 (index p-1 of the result)."""
        n = len(tokens)
        x = self.hidden(tokens, np.arange(n), np.full(n, n), params)
        rows = np.arange(n - 1)
        rb = np.arange(n)
        _, logprob, _ = self.head(x, rows, rb, np.asarray(tokens)[1:], inv_temperature, params)
        return logprob


# ---- dump reading ------------------------------------------------------------------

BIN_ARRAYS = ("token", "position", "subtree_end", "head_row", "row_begin", "target", "ref_begin",
              "ref_sample", "ref_position", "weights", "logits", "logprob", "entropy", "loss")


def load_manifest(dump_dir):
    with open(os.path.join(dump_dir, "manifest.json")) as f:
        return json.load(f)


def load_case(dump_dir, case):
    """case: a manifest case entry. Returns (bins: list of dicts, grads: dict, loss)."""
    base = os.path.join(dump_dir, "cases", case["name"])
    bins = []
    for k in range(case["bins"]):
        d = os.path.join(base, "bin%d" % k)
        bins.append({a: np.load(os.path.join(d, a + ".npy")) for a in BIN_ARRAYS})
    manifest = load_manifest(dump_dir)
    grads = {p["name"]: np.load(os.path.join(base, "grads", p["name"] + ".npy")) for p in manifest["params"]}
    loss = float(np.load(os.path.join(base, "loss.npy")))
    return bins, grads, loss


def load_samples(dump_dir):
    """List of (tokens, trainable, coef) numpy arrays, one per sample."""
    d = os.path.join(dump_dir, "samples")
    tokens = np.load(os.path.join(d, "tokens.npy"))
    trainable = np.load(os.path.join(d, "trainable.npy"))
    coef = np.load(os.path.join(d, "coef.npy"))
    off = np.load(os.path.join(d, "offsets.npy"))
    return [(tokens[a:b], trainable[a:b], coef[a:b]) for a, b in zip(off[:-1], off[1:])]


def rel_err(a, b, tiny=1e-30):
    """||a - b|| / max(||b||, tiny), in float64."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm((a - b).ravel()) / max(float(np.linalg.norm(b.ravel())), tiny))
