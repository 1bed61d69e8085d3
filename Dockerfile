# syntax=docker/dockerfile:1
# vllm-stall-watchdog image: `python -m watchdog run` as UID/GID 65532 (numeric: the chart's runAsNonRoot checks it).
#   docker build -t REGISTRY/vllm-stall-watchdog:0.3.0 .
# Two stages: the builder installs the package and its dependencies into a venv; the final image gets that venv
# only (no pip cache, no build tools, no source tree). Both stages use the same pinned base, so the venv's
# python symlink (/usr/local/bin/python3.11) resolves the same way in the final image.

FROM python:3.11.11-slim-bookworm AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
WORKDIR /src
# Only what the package build needs (see .dockerignore): metadata, README (the project's readme) and the code.
COPY pyproject.toml README.md ./
COPY watchdog/ ./watchdog/
# A regular (non-editable) install of /src with the dependency ranges pinned in pyproject.toml. The wheel leaves
# watchdog/demo/ out (pyproject.toml's packages.find): no API emulator, control-plane driver or kubelet stand-in
# in the image; `python -m watchdog demo` there says in one line to run it from a source checkout.
RUN /opt/venv/bin/pip install --no-cache-dir /src

FROM python:3.11.11-slim-bookworm
LABEL org.opencontainers.image.title="vllm-stall-watchdog" \
      org.opencontainers.image.description="Deletes vLLM pods whose engine silently wedged" \
      org.opencontainers.image.version="0.3.0" \
      org.opencontainers.image.licenses="Apache-2.0"
# MALLOC_ARENA_MAX=2: glibc's per-thread malloc arenas (up to 8 per core) with the scrape workers cost ~20 MiB
# of resident memory at 2,000 pods for no speed (docs/scaling.md).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2
COPY --from=builder /opt/venv /opt/venv
# Numeric, so Kubernetes' runAsNonRoot can verify it without an /etc/passwd entry.
USER 65532:65532
# The watchdog's own /metrics, /healthz and /readyz (listenAddress [::]:8080, IPv4 and IPv6).
EXPOSE 8080
ENTRYPOINT ["python", "-m", "watchdog"]
CMD ["run"]
