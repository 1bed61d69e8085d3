"""The container image recipe: hadolint-clean, the UID the chart runs as, the entry point the chart relies on,
a final stage without build tools, the OCI archive builder (tests/image/oci_archive.py) building the same image
(base, build context, runtime config), and (e2e) the Dockerfile's own install step really produces a working
``python -m watchdog`` without the demo (no emulator, control-plane driver or kubelet stand-in in the image).
No Docker engine exists on the test machines: nothing here builds or runs the image.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
import tools
import yaml

from watchdog.cli.demo import NOT_INSTALLED

REPO = tools.REPO
DOCKERFILE = REPO / "Dockerfile"
CHART = REPO / "helm" / "vllm-stall-watchdog"
# What python:*-slim-* sets that the watchdog's image inherits at run time (docker-library/python's Dockerfile:
# `ENV PATH /usr/local/bin:$PATH` over Debian's default PATH, `ENV LANG C.UTF-8`; its GPG_KEY, PYTHON_VERSION and
# PYTHON_SHA256 describe its own build).
BASE_IMAGE_ENV = {"PATH": "/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                  "LANG": "C.UTF-8"}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_stages(text: str) -> list[Stage]:
    """Dockerfile -> stages of (INSTRUCTION, arguments); continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (line.startswith("#") and not pending):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            parts = args.split()
            stages.append(Stage(parts[0], parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None))
        elif stages:
            stages[-1].instructions.append((keyword, args))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_stages(DOCKERFILE.read_text())


def test_hadolint_passes() -> None:
    done = subprocess.run([tools.hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""


def test_hadolint_is_not_a_no_op(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install -y curl\n")
    done = subprocess.run([tools.hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "DL3007" in done.stdout


def test_two_stages_on_the_same_pinned_base(stages: list[Stage]) -> None:
    assert len(stages) == 2
    builder, final = stages
    assert builder.name == "builder" and final.name is None
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", builder.base), builder.base
    assert final.base == builder.base  # the venv's python symlink must resolve to the same interpreter


def test_final_stage_gets_the_venv_only_and_no_build_tools(stages: list[Stage]) -> None:
    final = stages[1]
    assert final.all("RUN") == [], "the final stage runs nothing (no apt, no pip)"
    assert final.all("COPY") == ["--from=builder /opt/venv /opt/venv"]
    assert final.all("ADD") == []
    env = " ".join(final.all("ENV"))
    for setting in ("PATH=/opt/venv/bin:$PATH", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1",
                    "MALLOC_ARENA_MAX=2"):
        assert setting in env


def test_entrypoint_and_cmd_are_what_the_chart_expects(stages: list[Stage]) -> None:
    final = stages[1]
    assert final.all("ENTRYPOINT") == ['["python", "-m", "watchdog"]']
    assert final.all("CMD") == ['["run"]']
    assert final.all("EXPOSE") == ["8080"]
    deployment = chart_deployment()
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "command" not in container and container["args"][0] == "run"
    assert container["ports"][0]["containerPort"] == 8080


def chart_deployment() -> dict:
    rendered = subprocess.run([tools.helm(), "template", "vsw", str(CHART)], capture_output=True, text=True,
                              check=True, timeout=120).stdout
    return next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")


def test_image_user_is_the_charts_run_as_user(stages: list[Stage]) -> None:
    users = stages[1].all("USER")
    assert users == ["65532:65532"]  # numeric, so runAsNonRoot can verify it
    pod = chart_deployment()["spec"]["template"]["spec"]
    # The chart fixes no UID (UID-range platforms such as OpenShift assign one): the image's USER applies, and
    # runAsNonRoot holds because that USER is numeric and not 0.
    for context in (pod["securityContext"], pod["containers"][0]["securityContext"]):
        assert context["runAsNonRoot"] is True
        assert not {"runAsUser", "runAsGroup"} & set(context)
    assert "fsGroup" not in pod["securityContext"]


def test_image_version_label_matches_package_and_chart(stages: list[Stage]) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    labels = " ".join(stages[1].all("LABEL"))
    assert f'org.opencontainers.image.version="{version}"' in labels
    assert chart["appVersion"] == version


def builder_copies(stage: Stage) -> list[tuple[list[str], str]]:
    out = []
    for args in stage.all("COPY"):
        parts = shlex.split(args)
        assert not any(p.startswith("--") for p in parts), f"unexpected COPY flag in the builder: {args}"
        out.append((parts[:-1], parts[-1]))
    return out


def test_dockerignore_keeps_junk_out_but_not_what_the_build_copies(stages: list[Stage]) -> None:
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".venv", ".cache", "tests", ".git"} <= ignored
    for sources, _ in builder_copies(stages[0]):
        for source in sources:
            assert source.rstrip("/") not in ignored, f"{source} is copied by the build but .dockerignore drops it"
            assert (REPO / source).exists(), source


def oci_archive_module() -> ModuleType:
    """tests/image/oci_archive.py (a script), loaded by path."""
    spec = importlib.util.spec_from_file_location("oci_archive", REPO / "tests" / "image" / "oci_archive.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dockerfile_runtime_config(final: Stage, version: str) -> dict[str, object]:
    """The final image's OCI runtime config as the Dockerfile declares it, over the base image's environment."""
    env = dict(BASE_IMAGE_ENV)
    for args in final.all("ENV"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            env[key] = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m[1] or m[2], ""), value)
    labels = dict(item.split("=", 1) for args in final.all("LABEL") for item in shlex.split(args))
    (entrypoint,), (cmd,), (user,) = final.all("ENTRYPOINT"), final.all("CMD"), final.all("USER")
    return {"User": user, "Env": env, "Entrypoint": json.loads(entrypoint), "Cmd": json.loads(cmd),
            "ExposedPorts": {f"{port}/tcp": {} for args in final.all("EXPOSE") for port in args.split()},
            "Labels": labels, "version": version}


def test_oci_archive_builds_what_the_dockerfile_builds(stages: list[Stage]) -> None:
    """The archive (README: "an equivalent OCI archive") has the Dockerfile's Python line and Debian suite, its
    build context, and exactly its runtime config: user, entrypoint, command, port, environment, labels."""
    oci = oci_archive_module()
    builder, final = stages
    assert re.fullmatch(rf"python:{re.escape(oci.PYTHON_LINE)}\.\d+-slim-{oci.SUITE}", final.base), final.base
    assert oci.SUITE == "bookworm" and oci.PYTHON_LINE == "3.11"  # Debian bookworm's python3 is 3.11
    copied = [source.rstrip("/") for sources, _ in builder_copies(builder) for source in sources]
    assert sorted(copied) == sorted(oci.BUILD_CONTEXT)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    archive = dict(oci.image_config(version))
    archive["Env"] = dict(item.split("=", 1) for item in archive["Env"])
    archive["version"] = version
    assert archive == dockerfile_runtime_config(final, version)


@pytest.mark.e2e
def test_dockerfile_install_step_yields_a_working_watchdog(stages: list[Stage], tmp_path: Path) -> None:
    """Re-enact the builder stage on this machine: copy exactly what its COPY lines copy into a fresh build
    context, create a fresh venv, run the Dockerfile's own pip command (paths mapped), then run the installed
    ``python -m watchdog`` from outside the repository. Proves the COPY list is enough for a non-editable
    install, package data included. (No image is built: there is no Docker engine here.)"""
    builder = stages[0]
    src, venv = tmp_path / "src", tmp_path / "venv"
    (workdir,) = builder.all("WORKDIR")
    assert workdir == "/src"
    src.mkdir()
    for sources, dest in builder_copies(builder):
        target = src / dest.removeprefix("./") if dest not in (".", "./") else src
        for source in sources:
            path = REPO / source
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)

    def mapped(token: str) -> str:
        for prefix, local in (("/opt/venv", venv), ("/src", src)):
            if token == prefix or token.startswith(prefix + "/"):
                return str(local) + token[len(prefix):]
        return token

    runs = builder.all("RUN")
    assert runs[0] == "python -m venv /opt/venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    (install,) = [r for r in runs if "pip install" in r]
    command = [mapped(t) for t in shlex.split(install)]
    # The machine's pip settings (index, proxy) apply; nothing of the test's own venv leaks in.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    python = str(venv / "bin" / "python")
    where = subprocess.run([python, "-c", "import watchdog; print(watchdog.__file__)"], capture_output=True,
                           text=True, cwd=tmp_path, timeout=60)
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr  # the installed copy, not the repo
    helped = subprocess.run([python, "-m", "watchdog", "--help"], capture_output=True, text=True, cwd=tmp_path,
                            timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert "replay" in helped.stdout
    replayed = subprocess.run([python, "-m", "watchdog", "replay", "example:seed-incident"], capture_output=True,
                              text=True, cwd=tmp_path, timeout=60)
    assert replayed.returncode == 0 and '"stalled": true' in replayed.stdout, replayed.stderr
    ran = subprocess.run([python, "-m", "watchdog", "run", "--help"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=60)
    assert ran.returncode == 0 and "--window-seconds" in ran.stdout, ran.stderr

    # The image carries no demo: no emulator, control-plane driver, kubelet stand-in or simulated pods (the wheel
    # leaves watchdog/demo out), and the verb says so in one line.
    (site,) = venv.glob("lib/python*/site-packages")
    assert (site / "watchdog" / "core" / "detector.py").is_file()
    assert not (site / "watchdog" / "demo").exists(), "the image would carry watchdog/demo"
    (record,) = site.glob("vllm_stall_watchdog-*.dist-info/RECORD")
    assert "watchdog/demo/" not in record.read_text()
    refused = subprocess.run([python, "-m", "watchdog", "demo"], capture_output=True, text=True, cwd=tmp_path,
                             timeout=60)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout + refused.stderr
    assert refused.stderr == NOT_INSTALLED + "\n"
