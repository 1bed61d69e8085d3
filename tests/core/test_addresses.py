"""The pod-IP filter (SSRF guard): every known metadata address, loopback and the other non-unicast ranges are
refused, in every IPv6 wrapping; loopback passes only with allow_loopback. Pure: only the function is called,
no traffic is ever sent to any of these addresses."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from builders import BASE

from watchdog.core.addresses import METADATA_ADDRESSES, is_scrapable, refusal
from watchdog.core.discovery import discover, recheck
from watchdog.core.model import NAMESPACE_LABEL, Target
from watchdog.demo.scenario import pod_manifest

# Written out here, not read from the module: removing an entry from METADATA_ADDRESSES fails its test.
EXPECTED_METADATA = [
    "169.254.169.254", "fd00:ec2::254", "169.254.169.253", "fd00:ec2::253", "169.254.169.123", "fd00:ec2::123",
    "169.254.169.250", "169.254.169.251", "169.254.170.2", "169.254.170.23", "fd00:ec2::23", "fd20:ce::254",
    "169.254.169.252", "168.63.129.16", "100.100.100.200", "192.0.0.192", "169.254.0.23", "169.254.42.42",
    "fd00:42::42",
]
ALL_METADATA = sorted(set(EXPECTED_METADATA) | set(METADATA_ADDRESSES))
IPV4_METADATA = [a for a in ALL_METADATA if ipaddress.ip_address(a).version == 4]
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "llama-7d9f", "uid": "rs-uid"}}
NS = {"metadata": {"name": "ml", "labels": {NAMESPACE_LABEL: "true"}}}


@pytest.mark.parametrize("ip", ALL_METADATA)
def test_every_metadata_address_is_refused_even_with_loopback_allowed(ip: str) -> None:
    assert METADATA_ADDRESSES.get(ip)  # listed, with who serves what there
    for allow in (False, True):
        why = refusal(ip, allow_loopback=allow)
        assert why is not None and why.startswith("cloud metadata address"), (ip, why)
    # Other spellings of the same address are caught too (the comparison is on the parsed address).
    assert not is_scrapable(ipaddress.ip_address(ip).exploded)


@pytest.mark.parametrize("ip", IPV4_METADATA)
def test_ipv4_metadata_addresses_are_refused_in_every_ipv6_wrapping(ip: str) -> None:
    v4 = ipaddress.IPv4Address(ip)
    packed = int(v4)
    forms = [f"::ffff:{ip}", f"::ffff:{packed >> 16:x}:{packed & 0xFFFF:x}", str(ipaddress.IPv6Address(
        (0x2002 << 112) | (packed << 80) | 1))]  # IPv4-mapped (dotted, hex) and 6to4
    for form in forms:
        why = refusal(form, allow_loopback=True)
        assert why is not None and "cloud metadata address" in why, (form, why)


@pytest.mark.parametrize("ip", [
    # the addresses the issue saw passing, by name
    "fd00:ec2::254", "100.100.100.200", "127.0.0.1",
    # loopback, unspecified, this-network, link-local, multicast, broadcast, reserved
    "127.0.0.2", "127.255.255.254", "::1", "0.0.0.0", "0.1.2.3", "::", "169.254.1.1", "fe80::1", "224.0.0.1",
    "239.1.2.3", "ff02::1", "255.255.255.255", "240.0.0.1", "64:ff9b::a9fe:a9fe",
    # IPv4 in IPv6: mapped, 6to4, Teredo (client 127.0.0.1, obfuscated)
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "2002:7f00:1::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",
    # not one plain address
    "not-an-ip", "10.0.0.1:80", "[fd00::7]", "fe80::1%eth0", "fd00::7%1", " 10.0.0.1", "", "0127.0.0.1",
])
def test_unsafe_addresses_are_refused(ip: str) -> None:
    assert refusal(ip) is not None
    assert not is_scrapable(ip)


@pytest.mark.parametrize("ip", [None, 2130706433, b"10.0.0.1", ["10.0.0.1"]])
def test_only_text_is_an_address(ip: Any) -> None:
    assert refusal(ip) == "not a plain IP address"


@pytest.mark.parametrize("ip", ["10.0.0.7", "172.16.3.4", "192.168.1.2", "100.64.0.1", "100.100.100.201",
                                "8.8.8.8", "fd00::7", "fd00:ec2::255", "2600:1f18::1", "168.63.129.17"])
def test_ordinary_pod_addresses_are_accepted(ip: str) -> None:
    assert refusal(ip) is None and is_scrapable(ip)


@pytest.mark.parametrize("ip", ["127.0.0.1", "127.0.0.2", "127.10.3.4", "::1"])
def test_loopback_passes_only_with_allow_loopback(ip: str) -> None:
    assert refusal(ip) == "loopback"
    assert refusal(ip, allow_loopback=True) is None


@pytest.mark.parametrize("ip", ["::ffff:127.0.0.1", "2002:7f00:1::1", "169.254.169.254", "0.0.0.0", "fe80::1"])
def test_allow_loopback_relaxes_nothing_else(ip: str) -> None:
    assert refusal(ip, allow_loopback=True) is not None


# -- through discovery ----------------------------------------------------------------------------------------
def pod(ip: str, name: str = "llama-0") -> dict[str, Any]:
    p = pod_manifest("ml", name, ip, 8000, owner=RS)
    p["metadata"]["uid"] = f"uid-{name}"
    return p


@pytest.mark.parametrize("ip", ["fd00:ec2::254", "100.100.100.200", "168.63.129.16", "127.0.0.1", "::1"])
def test_discovery_skips_them_as_unsafe_ip(ip: str) -> None:
    found = discover([NS], [(Target("vllm", "x=y"), [pod(ip)])], base=BASE)
    assert found.targets == [] and dict(found.skipped) == {"unsafe_ip": 1}


def test_discovery_takes_loopback_pods_only_when_allowed_and_never_a_metadata_address() -> None:
    pods = [pod("127.0.0.2"), pod("100.100.100.200", "alibaba")]
    found = discover([NS], [(Target("vllm", "x=y"), pods)], allow_loopback=True, base=BASE)
    assert [t.ip for t in found.targets] == ["127.0.0.2"] and dict(found.skipped) == {"unsafe_ip": 1}


def test_recheck_keeps_a_loopback_target_discovery_accepted_but_refuses_a_new_loopback_ip() -> None:
    p = pod("127.0.0.2")
    [target] = discover([NS], [(Target("vllm", "x=y"), [p])], allow_loopback=True, base=BASE).targets
    assert recheck(p, NS, target) is None  # the same IP discovery accepted: not re-judged differently
    moved = pod("127.0.0.3")
    assert recheck(moved, NS, target) == "discovery now skips it: unsafe_ip"
    metadata = pod("169.254.169.254")
    assert recheck(metadata, NS, target) == "discovery now skips it: unsafe_ip"
