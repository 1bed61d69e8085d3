"""A random-weight llama-architecture model in GGUF, written with the ``gguf`` package's GGUFWriter: what the
engine tier loads into a real llama-server (no hub is reachable; no weights are shipped). It generates garbage
text, through exactly the code paths a real model takes: tokenizer, prompt batches, decode, sampling, slots.

Vocabulary: SentencePiece-style ("llama" tokenizer model) with <unk>, <s>, </s>, the 256 byte-fallback tokens
<0x00>..<0xFF> (so any prompt tokenizes: one token per byte of text outside the vocabulary) and a few hundred
word pieces. Embedding 512, 4 layers, feed-forward 1536, 8 heads / 4 KV heads: ~52 MB in F32.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

N_EMBD, N_LAYER, N_FF, N_HEAD, N_HEAD_KV, N_CTX_TRAIN = 512, 4, 1536, 8, 4, 32768
SEED = 31  # the same file every time: the weights are random, not arbitrary
# Bumped whenever the model's shape or vocabulary changes: the cached file is named by it.
MODEL_VERSION = 1
WORDS = ["the", "a", "and", "of", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at", "by",
         "engine", "token", "stall", "watch", "dog", "pod", "metric", "decode", "prompt", "slot", "server", "loop"]


def model_name() -> str:
    return f"random-llama-{N_EMBD}x{N_LAYER}-v{MODEL_VERSION}.gguf"


def _vocab() -> tuple[list[str], list[float], list[int]]:
    import gguf

    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    # Unique pieces (llama.cpp refuses a vocabulary with a token twice): the space, words with and without it,
    # the letters.
    pieces = list(dict.fromkeys(["\u2581", *(f"\u2581{w}" for w in WORDS), *WORDS, *"abcdefghijklmnopqrstuvwxyz"]))
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    # SentencePiece scores: longer pieces first when merging; the byte tokens and controls score 0.
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(pieces))]
    return tokens, scores, [int(t) for t in types]


def write_model(path: Path) -> Path:
    """Write the model to ``path`` (atomically: a partial file never has the final name). Returns ``path``."""
    import gguf

    tokens, scores, types = _vocab()
    rng = np.random.default_rng(SEED)
    head_dim = N_EMBD // N_HEAD

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("vllm-stall-watchdog random llama")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    # numpy shapes are (rows, columns) = (out, in); GGUF stores them reversed, as llama.cpp expects.
    writer.add_tensor("token_embd.weight", w(len(tokens), N_EMBD))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", w(len(tokens), N_EMBD))
    kv = head_dim * N_HEAD_KV
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", w(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_k.weight", w(kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w(kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_output.weight", w(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def cached_model(directory: Path) -> Path:
    """The model file in ``directory`` (the llama-server cache), written on first use."""
    path = directory / model_name()
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        write_model(path)
    return path
