#!/usr/bin/env python3
"""Write a tiny random-weight llama-architecture GGUF model for llama-server.

The weights are random: the answers are nonsense, but every prompt token runs
through real attention layers and fills a real KV cache, so a prompt that
llama-server finds in its cache answers much sooner than one it must compute.
That difference is all the end-to-end test needs.

Vocabulary (SentencePiece-style, tokenizer.ggml.model = "llama"): the control
tokens, the 256 byte-fallback tokens llama.cpp requires, and every piece
"▁x", "▁xy", "▁xyz" over a-z. prefixring's workloads write text as words of
a space and three lowercase letters (sim/workload.Words), so one such word is
exactly one token here, as it is one stand-in token in the simulated engine:
a workload's token counts mean the same thing against both.

Answers never contain control or byte tokens: one residual dimension is held
at a constant (embedding column 0 is 1, and no layer writes to it), and the
output rows of those tokens read it with a large negative weight. So an
answer always runs to max_tokens, and its text is plain ASCII words.

Needs numpy and llama.cpp's gguf-py (PYTHONPATH=<llama.cpp>/gguf-py).
"""
import argparse
import itertools
import string
import sys

import numpy as np

import gguf

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONTROL = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]


def vocab():
    """Tokens, scores and types; ids 0..len(CONTROL)+255 are never sampled."""
    toks = list(CONTROL)
    types = [gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * (len(CONTROL) - 1)
    toks += ["<0x%02X>" % b for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    n_unsampled = len(toks)
    words = ["\u2581"] + list(string.ascii_lowercase)
    for n in (1, 2, 3):
        words += ["\u2581" + "".join(p) for p in itertools.product(string.ascii_lowercase, repeat=n)]
    toks += words
    types += [gguf.TokenType.NORMAL] * len(words)
    # SentencePiece merges the highest-scoring pair first; the only multi-
    # character pieces are "▁"-prefixed chains, so longer is simply better.
    scores = [0.0] * n_unsampled + [float(len(w)) for w in words]
    return toks, scores, types, n_unsampled


def weights(a, n_vocab, n_unsampled, rng):
    """Random tensors in llama.cpp's names; numpy shape is (out, in)."""
    d, ff, kv = a.embd, a.ff, a.embd // a.heads * a.kv_heads
    dt = np.float16 if a.dtype == "f16" else np.float32

    def rand(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dt)

    t = {}
    emb = rand(n_vocab, d).astype(np.float32)
    emb[:, 0] = 1.0  # the constant dimension (see the module doc)
    t["token_embd.weight"] = emb
    for i in range(a.layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(d, np.float32)
        t[p + "attn_q.weight"] = rand(d, d)
        t[p + "attn_k.weight"] = rand(kv, d)
        t[p + "attn_v.weight"] = rand(kv, d)
        out = rand(d, d)
        out[0, :] = 0  # no layer writes the constant dimension
        t[p + "attn_output.weight"] = out
        t[p + "ffn_norm.weight"] = np.ones(d, np.float32)
        t[p + "ffn_gate.weight"] = rand(ff, d)
        t[p + "ffn_up.weight"] = rand(ff, d)
        down = rand(d, ff)
        down[0, :] = 0
        t[p + "ffn_down.weight"] = down
    t["output_norm.weight"] = np.ones(d, np.float32)
    head = rand(n_vocab, d)
    head[:, 0] = 0
    head[:n_unsampled, :] = 0
    head[:n_unsampled, 0] = -8  # logit ~ -8 * (dimension 0 after RMS norm, ~10 or more)
    t["output.weight"] = head
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=768)
    ap.add_argument("--ctx", type=int, default=32768, help="trained context length")
    ap.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.embd % a.heads or a.heads % a.kv_heads:
        sys.exit("embd must divide by heads, heads by kv-heads")

    toks, scores, types, n_unsampled = vocab()
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("prefixring-tiny-random")
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.embd)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(a.embd // a.heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(toks))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)  # workload text already starts with a space
    w.add_chat_template(CHAT_TEMPLATE)
    for name, arr in weights(a, len(toks), n_unsampled, np.random.default_rng(a.seed)).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: llama, {a.layers} layers, hidden {a.embd}, {a.heads} heads ({a.kv_heads} kv), "
          f"ffn {a.ff}, vocab {len(toks)}, {a.dtype}", file=sys.stderr)


if __name__ == "__main__":
    main()
