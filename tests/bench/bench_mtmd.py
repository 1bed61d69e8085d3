"""Benchmark (not a test): how long a real llama-server's multimodal (mtmd) image step keeps every llamacpp
signal flat, by image tokens and vision-encoder size (issue 41 item 4; docs/engines.md quotes the figures).

    python tests/bench/bench_mtmd.py [--runs N] [--no-large]

Needs the engines tier's llama-server (`make llama-server`). For each case it writes a random projector
(tests/engines/model.py, LLaVA-1.5 layout) into a temporary directory, starts llama-server with it and the tier's
random text model on 127.0.0.60 (one CPU thread, `-t 1`, as the tier), sends ``/completion`` prompts of text,
N images back to back, text, and records /metrics every 0.25 s. Printed per run: the image tokens, the prompt
time llama-server reports, and the longest stretch with a request processing while none of n_decode_total,
tokens_predicted_total, prompt_tokens_total moved (the time a watchdog window must exceed), with the load average
(2 shared cores: the figures grow with it). The image step is the vision encode plus the decode of the image's
tokens into the text model (mtmd_helper_decode_image_chunk): neither goes through metrics_post_decode.

Cases: width 512 x 4 layers at 224, 336, 448, 672 px (256, 576, 1,024, 2,304 image tokens); 4 images of 224 px
back to back; and (unless --no-large) CLIP ViT-L/14-336 size (width 1024, 24 layers, 576 tokens: LLaVA-1.5's
encoder; a 1.2 GB projector, written and removed again).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engines"))  # llama_kit, model
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # repository root -> "watchdog"

from llama_kit import LlamaServer, Recorder, cache_dir, complete, media_prompt, png_image, server_binary
from model import V_PATCH, cached_model, write_mmproj

SIGNALS = ("n_decode_total", "tokens_predicted_total", "prompt_tokens_total")
#: (vision width, layers, image side, images back to back)
CASES = [(512, 4, 224, 1), (512, 4, 336, 1), (512, 4, 448, 1), (512, 4, 672, 1), (512, 4, 224, 4)]
LARGE = (1024, 24, 336, 1)


def run_case(work: Path, width: int, layers: int, side: int, images: int, runs: int) -> None:
    mmproj = write_mmproj(work / f"mmproj-{width}x{layers}-{side}.gguf", side, width, layers)
    server = LlamaServer(server_binary(), cached_model(cache_dir()), "127.0.0.60", work / "server.log",
                         batch=4096, ubatch=4096, mmproj=mmproj).start()
    try:
        prompt = media_prompt(server, "the engine ", [png_image(64, seed) for seed in range(images)], " is")
        for run in range(runs):
            with Recorder(server, work / f"bodies-{side}-{run}", interval_s=0.25) as rec:
                answer = complete(server, prompt, 2, timeout_s=900)
            tokens = images * (side // V_PATCH) ** 2
            print(f"{width:>5} x {layers:<2} {side:>4} px x {images}  {tokens:>5} image tokens  "
                  f"prompt {answer['timings']['prompt_ms'] / 1000:6.1f} s  "
                  f"signals flat {rec.longest_flat_busy_s(SIGNALS):6.1f} s  load {os.getloadavg()[0]:5.1f}",
                  flush=True)
    finally:
        server.stop()
        mmproj.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="requests per case (default 2)")
    parser.add_argument("--no-large", action="store_true", help="leave out the CLIP ViT-L size (1.2 GB, minutes)")
    args = parser.parse_args()
    if not server_binary().is_file():
        sys.exit(f"llama-server not built ({server_binary()}): run `make llama-server`")
    print("vision encoder   image          tokens       llama-server's prompt time   all signals flat")
    with tempfile.TemporaryDirectory(prefix="bench-mtmd-") as tmp:
        for case in CASES + ([] if args.no_large else [LARGE]):
            run_case(Path(tmp), *case, args.runs)


if __name__ == "__main__":
    main()
