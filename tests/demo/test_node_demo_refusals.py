"""``demo --control-plane real --node real``: its refusals, each one line and exit 2 before anything starts (no
network namespace, no process): --node without --control-plane real, not root, the node not built (`make node`),
host packages missing, no watchdog image archive."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from watchdog.cli.main import main
from watchdog.demo.controlplane.locate import DIR_ENV
from watchdog.demo.node import images, kit

REAL_NODE = ["demo", "--control-plane", "real", "--node", "real"]


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Exit 2, nothing on stdout, no traceback; the last stderr line (argparse prints its usage above it)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert (code, out, len(err.strip().splitlines())) == (2, "", 1), err
    assert err.startswith("vllm-watchdog demo: --node real: ")
    return err.strip()


def fake_node_binaries(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in kit.NODE_BINARIES:
        (directory / name).write_text("#!/bin/sh\nexit 1\n")
        (directory / name).chmod(0o755)
    return directory


@pytest.fixture(autouse=True)
def _nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DIR_ENV, raising=False)

    def no_node(*_: object, **__: object) -> None:
        raise AssertionError("a refusal must come before any node is started")
    monkeypatch.setattr(kit.Node, "start", no_node)


def test_node_real_only_with_a_real_control_plane(capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["demo", "--node", "real"], capsys)
    assert line == "vllm-watchdog demo: error: argument --node: only with --control-plane real"


def test_not_root_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    line = one_line(REAL_NODE, capsys)
    assert line == ("vllm-watchdog demo: --node real: a real node needs root (a network namespace, containerd, the "
                    "kubelet; binaries from `make node`)")


def test_unbuilt_node_names_make_node_and_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    line = one_line([*REAL_NODE, "--control-plane-dir", str(tmp_path)], capsys)
    assert line == ("vllm-watchdog demo: --node real: node not built (kube-apiserver, kube-controller-manager, "
                    f"kube-scheduler, kubelet, kube-proxy missing in {tmp_path}): run `make node` (Go >= 1.25)")


def test_missing_host_packages_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    line = one_line([*REAL_NODE, "--control-plane-dir", str(fake_node_binaries(tmp_path / "bin"))], capsys)
    assert line.startswith("vllm-watchdog demo: --node real: host packages missing (containerd, runc, ctr, ")
    assert line.endswith("apt-get install containerd runc containernetworking-plugins iptables mmdebstrap umoci "
                         "skopeo gcc")


def test_no_image_archive_names_make_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(kit, "host_missing", list)
    monkeypatch.setattr(images, "IMAGE_ARCHIVE", tmp_path / "image.oci.tar")
    monkeypatch.setattr(images, "WATCHDOG_ARCHIVE", tmp_path / "node.oci.tar")
    line = one_line([*REAL_NODE, "--control-plane-dir", str(fake_node_binaries(tmp_path / "bin"))], capsys)
    assert line == (f"vllm-watchdog demo: --node real: the watchdog image archive is not built (neither "
                    f"{tmp_path / 'image.oci.tar'} nor {tmp_path / 'node.oci.tar'}): run `make node`")
