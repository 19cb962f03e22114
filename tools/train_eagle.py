#!/usr/bin/env python3
"""Trains an EAGLE(-1) draft head for a Llama target and saves it in the EAGLE layout.

Runs on the GPU machine (torch, transformers, tokenizers, safetensors); pagellm never runs Python.
The head (Li et al., "EAGLE", 2024) is one decoder layer whose input at position p is
fc(concat(embed(t[p+1]), f[p])), f[p] being the target's final-normed hidden state at p; its first
layer has no input norm and there is no final norm: its output goes through the target's LM head
and predicts t[p+2], and serves as the feature of the next draft position. Training follows the
paper: regress the target's next feature (smooth L1) plus 0.1 x the cross-entropy against the
target's own next-token distribution, on teacher-forced target features with a little noise.

Corpus: Python sources of this machine (the standard library and installed packages, as
../shared/models/PYCODE.md describes for pycode-25M), tokenized with the target's tokenizer.json.

Output folder: config.json (the target's, with num_hidden_layers 1) and model.safetensors with
fc.weight [h, 2h], layers.0.self_attn.{q,k,v,o}_proj.weight, layers.0.mlp.{gate,up,down}_proj.weight
and layers.0.post_attention_layernorm.weight, in bf16; embedding and LM head are the target's.

  python3 tools/train_eagle.py --target pycode-25M --out pycode-25M-eagle [--steps 3000]
"""
import argparse
import glob
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM


def corpus_files(roots, limit_bytes):
    files = []
    for root in roots:
        files += glob.glob(os.path.join(root, "**", "*.py"), recursive=True)
    files = sorted(set(files))
    random.Random(0).shuffle(files)
    out, total = [], 0
    for f in files:
        try:
            size = os.path.getsize(f)
        except OSError:
            continue
        if size == 0 or size > 1 << 20:
            continue
        out.append(f)
        total += size
        if total >= limit_bytes:
            break
    return out


def tokenize(files, tok, bos):
    texts = []
    for f in files:
        try:
            texts.append(open(f, encoding="utf-8").read())
        except (UnicodeDecodeError, OSError):
            continue
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.append(bos)
        ids += enc.ids
    return torch.tensor(ids, dtype=torch.long)


def rope(x, positions, theta):
    # x [B, H, S, D], rotate-half convention (HF Llama).
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = positions.float()[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rot = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


class EagleHead(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, self.nh, self.nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or h // self.nh
        inter = cfg["intermediate_size"]
        rp = cfg.get("rope_parameters") or {}
        self.theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.fc = lin(2 * h, h)
        self.q, self.k, self.v = lin(h, self.nh * self.hd), lin(h, self.nkv * self.hd), lin(h, self.nkv * self.hd)
        self.o = lin(self.nh * self.hd, h)
        self.gate, self.up, self.down = lin(h, inter), lin(h, inter), lin(inter, h)
        self.post_norm = torch.nn.Parameter(torch.ones(h))

    def forward(self, emb, feat):
        b, s, _ = emb.shape
        x = self.fc(torch.cat([emb, feat], dim=-1))
        pos = torch.arange(s, device=x.device)
        q = self.q(x).view(b, s, self.nh, self.hd).transpose(1, 2)
        k = self.k(x).view(b, s, self.nkv, self.hd).transpose(1, 2)
        v = self.v(x).view(b, s, self.nkv, self.hd).transpose(1, 2)
        q, k = rope(q, pos, self.theta), rope(k, pos, self.theta)
        rep = self.nh // self.nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        n = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        n = (n * self.post_norm.float()).to(x.dtype)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--corpus-mb", type=int, default=60)
    ap.add_argument("--roots", nargs="*", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    cfg = json.load(open(os.path.join(args.target, "config.json")))
    roots = args.roots or sorted(set(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))
                                     or p.rstrip("/").endswith(("python3.12", "python3.11"))))
    t0 = time.time()
    files = corpus_files(roots, args.corpus_mb << 20)
    tok = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    ids = tokenize(files, tok, cfg.get("bos_token_id") or 1)
    n_seq = ids.numel() // args.seq_len
    data = ids[: n_seq * args.seq_len].view(n_seq, args.seq_len)
    held = data[-64:]
    data = data[:-64]
    print(f"corpus: {len(files)} files, {ids.numel()} tokens, {n_seq} sequences ({time.time() - t0:.1f} s)",
          flush=True)

    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.bfloat16).to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    embed = target.get_input_embeddings()
    lm_head = target.get_output_embeddings()
    head = EagleHead(cfg).to(dev)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warm = min(200, args.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))

    def losses(tokens, noise):
        with torch.no_grad():
            f = target.model(input_ids=tokens).last_hidden_state  # final-normed, [B, S, h]
            e = embed(tokens)
            # The target's distribution at p + 1 (over t[p+2]), what the head's row p predicts.
            p_t = F.softmax(lm_head(f[:, 1:-1]).float(), dim=-1)
        feat = f[:, :-1].float()
        if noise:
            feat = feat + (torch.rand_like(feat) - 0.5) * 0.2 * feat.std()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            g = head(e[:, 1:], feat.to(torch.bfloat16))  # position p: token p+1, feature p
            logits = lm_head(g[:, :-1]).float()  # predicts t[p+2]
        vloss = F.smooth_l1_loss(g[:, :-1].float(), f[:, 1:-1].float())
        ploss = -(p_t * F.log_softmax(logits, dim=-1)).sum(-1).mean()
        acc = (logits.argmax(-1) == p_t.argmax(-1)).float().mean()
        return vloss, ploss, acc

    gen = torch.Generator().manual_seed(0)
    t1 = time.time()
    for step in range(args.steps):
        idx = torch.randint(0, data.shape[0], (args.batch,), generator=gen)
        tokens = data[idx].to(dev)
        vloss, ploss, acc = losses(tokens, True)
        loss = vloss + 0.1 * ploss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 0.5)
        opt.step()
        sched.step()
        if step % 250 == 0 or step == args.steps - 1:
            print(f"step {step}: vloss {vloss.item():.4f} ploss {ploss.item():.3f} top-1 {acc.item():.3f} "
                  f"({time.time() - t1:.0f} s)", flush=True)
    head.eval()
    with torch.no_grad():
        vals = [losses(held[i : i + 16].to(dev), False) for i in range(0, held.shape[0], 16)]
    print("held-out: vloss %.4f ploss %.3f top-1 agreement with the target %.3f"
          % tuple(sum(v[i].item() for v in vals) / len(vals) for i in range(3)), flush=True)

    os.makedirs(args.out, exist_ok=True)
    sd = {
        "fc.weight": head.fc.weight,
        "layers.0.self_attn.q_proj.weight": head.q.weight,
        "layers.0.self_attn.k_proj.weight": head.k.weight,
        "layers.0.self_attn.v_proj.weight": head.v.weight,
        "layers.0.self_attn.o_proj.weight": head.o.weight,
        "layers.0.mlp.gate_proj.weight": head.gate.weight,
        "layers.0.mlp.up_proj.weight": head.up.weight,
        "layers.0.mlp.down_proj.weight": head.down.weight,
        "layers.0.post_attention_layernorm.weight": head.post_norm,
    }
    save_file({k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in sd.items()},
              os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    out_cfg = dict(cfg)
    out_cfg["num_hidden_layers"] = 1
    out_cfg["architectures"] = ["LlamaForCausalLM"]
    out_cfg["eagle"] = {"trained_by": "pagellm tools/train_eagle.py", "target": os.path.basename(
        os.path.normpath(args.target)), "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len}
    json.dump(out_cfg, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    print(f"saved {args.out} ({sum(p.numel() for p in head.parameters())} parameters, "
          f"{time.time() - t0:.0f} s in all)", flush=True)


if __name__ == "__main__":
    main()
