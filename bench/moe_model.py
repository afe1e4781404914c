#!/usr/bin/env python3
"""Writes a freshly initialised Hugging Face model directory (config.json, model.safetensors) of a
small Mixtral or Llama shape, for `weft train --model-dir` (bench/moe.sh): weft's presets fix
the expert count and width, and its --n-* overrides do not reach them.

    bench/moe_model.py DIR --experts 8 --top-k 2 --ffn 512   # MixtralForCausalLM
    bench/moe_model.py DIR --experts 0 --ffn 1024            # LlamaForCausalLM

Weights are N(0, 0.02) as Hugging Face initialises Llama (norms one), drawn from one pool of
normals with a seeded offset per tensor: the standard library only, no numpy."""
import argparse
import array
import json
import os
import random
import struct


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--positions", type=int, default=1024)
    p.add_argument("--aux-loss-coef", type=float, default=0.02)
    a = p.parse_args()
    C, F, E, HS = a.hidden, a.ffn, a.experts, a.hidden // a.heads
    moe = E > 0
    config = {
        "architectures": ["MixtralForCausalLM" if moe else "LlamaForCausalLM"],
        "model_type": "mixtral" if moe else "llama",
        "hidden_size": C, "intermediate_size": F, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "vocab_size": a.vocab, "max_position_embeddings": a.positions,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": True, "torch_dtype": "float32",
    }
    if moe:
        config.update(num_local_experts=E, num_experts_per_tok=a.top_k,
                      router_aux_loss_coef=a.aux_loss_coef)
    shapes = [("model.embed_tokens.weight", [a.vocab, C], True)]
    for l in range(a.layers):
        h = f"model.layers.{l}."
        shapes += [(h + "input_layernorm.weight", [C], False),
                   (h + "self_attn.q_proj.weight", [a.heads * HS, C], True),
                   (h + "self_attn.k_proj.weight", [a.kv_heads * HS, C], True),
                   (h + "self_attn.v_proj.weight", [a.kv_heads * HS, C], True),
                   (h + "self_attn.o_proj.weight", [C, a.heads * HS], True),
                   (h + "post_attention_layernorm.weight", [C], False)]
        if moe:
            shapes.append((h + "block_sparse_moe.gate.weight", [E, C], True))
            for e in range(E):
                x = h + f"block_sparse_moe.experts.{e}."
                shapes += [(x + "w1.weight", [F, C], True), (x + "w2.weight", [C, F], True),
                           (x + "w3.weight", [F, C], True)]
        else:
            shapes += [(h + "mlp.gate_proj.weight", [F, C], True),
                       (h + "mlp.up_proj.weight", [F, C], True),
                       (h + "mlp.down_proj.weight", [C, F], True)]
    shapes.append(("model.norm.weight", [C], False))

    rng = random.Random(1234)
    pool = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(1 << 20)))
    pool2 = pool + pool
    header, blobs, offset = {}, [], 0
    for name, shape, normal in shapes:
        n = 1
        for d in shape:
            n *= d
        if normal:
            out = array.array("f")
            while len(out) < n:
                start = rng.randrange(len(pool))
                out.extend(pool2[start:start + min(len(pool), n - len(out))])
        else:
            out = array.array("f", [1.0]) * n
        data = out.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(a.dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


if __name__ == "__main__":
    main()
