"""A random-weight llama-architecture model in GGUF, written with the ``gguf`` package's GGUFWriter: what the
engine tier loads into a real llama-server (no hub is reachable; no weights are shipped). It generates garbage
text, through exactly the code paths a real model takes: tokenizer, prompt batches, decode, sampling, slots.

Beside it, ``cached_mmproj`` writes a random multimodal projector (LLaVA-1.5 layout: a CLIP-style vision encoder and
an MLP projector into the model's embedding): loaded with ``--mmproj``, the server takes images through its real
multimodal (mtmd) path: image preprocessing, the vision encode, the image tokens decoded into the text model.

Vocabulary: SentencePiece-style ("llama" tokenizer model) with <unk>, <s>, </s>, the 256 byte-fallback tokens
<0x00>..<0xFF> (so any prompt tokenizes: one token per byte of text outside the vocabulary) and a few hundred
word pieces. Embedding 512, 4 layers, feed-forward 1536, 8 heads / 4 KV heads: ~52 MB in F32.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

N_EMBD, N_LAYER, N_FF, N_HEAD, N_HEAD_KV, N_CTX_TRAIN = 512, 4, 1536, 8, 4, 32768
SEED = 31  # the same file every time: the weights are random, not arbitrary
# Bumped whenever the model's shape or vocabulary changes: the cached file is named by it.
MODEL_VERSION = 1
WORDS = ["the", "a", "and", "of", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at", "by",
         "engine", "token", "stall", "watch", "dog", "pod", "metric", "decode", "prompt", "slot", "server", "loop"]


def _finish(writer: Any, tmp: Path, path: Path) -> Path:  # a gguf.GGUFWriter (gguf is imported where used)
    """Write the file ``writer`` holds (header, metadata, tensors) and move it into place at ``path`` at once."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


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
    return _finish(writer, tmp, path)


# The projector: vision encoder width and layers (feed-forward 4 x width, heads of 64, as CLIP's), image side and
# patch (448 / 14: 32 x 32 = 1,024 image tokens; every image is resized to it); the projection goes to the text
# model's embedding (N_EMBD). CLIP ViT-L/14-336 (LLaVA-1.5) would be width 1024, 24 layers, side 336.
V_EMBD, V_LAYER, V_IMAGE, V_PATCH = 512, 4, 448, 14
MMPROJ_VERSION = 1


def mmproj_name(image_size: int = V_IMAGE, embd: int = V_EMBD, layers: int = V_LAYER) -> str:
    return f"random-mmproj-mlp-{embd}x{layers}-{image_size}-v{MMPROJ_VERSION}.gguf"


def write_mmproj(path: Path, image_size: int = V_IMAGE, embd: int = V_EMBD, layers: int = V_LAYER) -> Path:
    """A random LLaVA-1.5-layout projector (``clip.projector_type`` "mlp"), as llama.cpp's
    tools/mtmd/clip.cpp loads it: patch embedding (a convolution), class and position embeddings, pre-norm, ``layers``
    transformer blocks (the last one is skipped: LLaVA takes the second-to-last layer), then mm.0 / GELU / mm.2 into
    the text model's N_EMBD. Every image is resized to ``image_size`` square: (image_size / 14)^2 image tokens."""
    import gguf

    rng = np.random.default_rng(SEED)
    ff, heads = 4 * embd, embd // 64

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(tmp), "clip")
    writer.add_name("vllm-stall-watchdog random mmproj")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", "mlp")
    writer.add_bool("clip.use_gelu", True)
    for key, value in (("embedding_length", embd), ("feed_forward_length", ff), ("block_count", layers),
                       ("attention.head_count", heads), ("projection_dim", N_EMBD), ("image_size", image_size),
                       ("patch_size", V_PATCH)):
        writer.add_uint32(f"clip.vision.{key}", value)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_tensor("v.patch_embd.weight", w(embd, 3, V_PATCH, V_PATCH))
    writer.add_tensor("v.class_embd", w(embd))
    writer.add_tensor("v.position_embd.weight", w((image_size // V_PATCH) ** 2 + 1, embd))
    writer.add_tensor("v.pre_ln.weight", ones(embd))
    writer.add_tensor("v.pre_ln.bias", zeros(embd))
    for i in range(layers):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", w(embd, embd))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", zeros(embd))
        for name in ("ln1", "ln2"):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", ones(embd))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", zeros(embd))
        writer.add_tensor(f"v.blk.{i}.ffn_up.weight", w(ff, embd))
        writer.add_tensor(f"v.blk.{i}.ffn_up.bias", zeros(ff))
        writer.add_tensor(f"v.blk.{i}.ffn_down.weight", w(embd, ff))
        writer.add_tensor(f"v.blk.{i}.ffn_down.bias", zeros(embd))
    writer.add_tensor("mm.0.weight", w(N_EMBD, embd))
    writer.add_tensor("mm.0.bias", zeros(N_EMBD))
    writer.add_tensor("mm.2.weight", w(N_EMBD, N_EMBD))
    writer.add_tensor("mm.2.bias", zeros(N_EMBD))
    return _finish(writer, tmp, path)


def cached_mmproj(directory: Path, image_size: int = V_IMAGE, embd: int = V_EMBD, layers: int = V_LAYER) -> Path:
    """The projector file in ``directory`` (the llama-server cache), written on first use."""
    path = directory / mmproj_name(image_size, embd, layers)
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        write_mmproj(path, image_size, embd, layers)
    return path


def cached_model(directory: Path) -> Path:
    """The model file in ``directory`` (the llama-server cache), written on first use."""
    path = directory / model_name()
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        write_model(path)
    return path
