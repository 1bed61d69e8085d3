"""Which pod IPs the watchdog may connect to: the SSRF guard of discovery. Pure: parses text, sends nothing.

A pod's ``status.podIP`` is the one host the watchdog ever scrapes, and anyone who can run a labelled pod in an
opted-in namespace influences it (a CNI bug, a hostile admission chain, a hand-made pod status through a
kubelet stand-in). So the address must be an ordinary unicast pod address; :func:`refusal` says why not. The
rules, in order:

- text that is not exactly one IPv4 or IPv6 address (no port, no zone such as ``%eth0``): refused;
- IPv4-mapped IPv6 (``::ffff:a.b.c.d``), 6to4 (``2002::/16``) and Teredo (``2001::/32``) forms: the embedded
  IPv4 address is judged by these rules, and the form itself is refused anyway (a pod IP is never written so);
- every address of :data:`METADATA_ADDRESSES` (cloud metadata, credential and DNS endpoints; a few of them
  are ordinary unicast addresses that no other rule catches, e.g. Alibaba's and Azure's);
- loopback (127.0.0.0/8, ``::1``), unless ``allow_loopback`` (the embedded demo and the tests run simulated
  pods on 127.0.0.x; the setting ``allow_loopback_pod_ips``, never on a real cluster);
- unspecified (0.0.0.0, ``::``; Linux connects 0.0.0.0 to the local host) and "this network" 0.0.0.0/8,
  link-local (169.254.0.0/16, fe80::/10: the metadata services' home), multicast, broadcast
  255.255.255.255 and reserved ranges (240.0.0.0/4, and IPv6 ``::/8`` etc. as :mod:`ipaddress` defines them).

Private (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10) and global unicast addresses are accepted:
pod networks use all of them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Known cloud metadata / credential / platform endpoints -> who serves what there. The ONE list: discovery
#: refuses each, whatever else the address looks like; tests/core/test_addresses.py checks every entry.
METADATA_ADDRESSES: Mapping[str, str] = {
    "169.254.169.254": "instance metadata (AWS IMDS, GCP, Azure IMDS, OCI, OpenStack, DigitalOcean, Hetzner, ...)",
    "fd00:ec2::254": "AWS instance metadata (IMDS) over IPv6",
    "169.254.169.253": "AWS VPC DNS resolver (Route 53 Resolver)",
    "fd00:ec2::253": "AWS VPC DNS resolver over IPv6",
    "169.254.169.123": "AWS Time Sync service",
    "fd00:ec2::123": "AWS Time Sync service over IPv6",
    "169.254.169.250": "AWS Windows activation (KMS)",
    "169.254.169.251": "AWS Windows activation (KMS)",
    "169.254.170.2": "AWS ECS task metadata and credentials endpoint",
    "169.254.170.23": "AWS EKS Pod Identity Agent (credentials)",
    "fd00:ec2::23": "AWS EKS Pod Identity Agent (credentials) over IPv6",
    "fd20:ce::254": "GCP metadata server over IPv6",
    "169.254.169.252": "GKE metadata server (Workload Identity)",
    "168.63.129.16": "Azure WireServer (platform agent, DNS, health probes)",
    "100.100.100.200": "Alibaba Cloud instance metadata",
    "192.0.0.192": "Oracle Cloud Classic metadata",
    "169.254.0.23": "Tencent Cloud instance metadata",
    "169.254.42.42": "Scaleway instance metadata",
    "fd00:42::42": "Scaleway instance metadata over IPv6",
}
_METADATA = {ipaddress.ip_address(a): what for a, what in METADATA_ADDRESSES.items()}
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_TEREDO = ipaddress.IPv6Network("2001::/32")

__all__ = ["METADATA_ADDRESSES", "is_scrapable", "refusal"]


def _parse(text: object) -> IPAddress | None:
    if not isinstance(text, str) or "%" in text:  # a zone index (fe80::1%eth0) names a host interface
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _embedded(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, 6to4 or Teredo IPv6 address carries (Teredo: the client's)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _TEREDO and ip.teredo is not None:
        return ip.teredo[1]
    return None


def _plain_refusal(ip: IPAddress, allow_loopback: bool) -> str | None:
    if ip in _METADATA:
        return f"cloud metadata address: {_METADATA[ip]}"
    if ip.is_loopback:
        return None if allow_loopback else "loopback"
    if ip.is_unspecified or (ip.version == 4 and ip in _THIS_NETWORK):
        return "unspecified or 'this network' (0.0.0.0/8, ::)"
    if ip.is_link_local:
        return "link-local (cloud metadata services live there)"
    if ip.is_multicast:
        return "multicast"
    if ip == _BROADCAST:
        return "broadcast"
    if ip.is_reserved:
        return "reserved range"
    return None


def refusal(text: object, *, allow_loopback: bool = False) -> str | None:
    """Why the pod IP ``text`` must not be scraped, or None when it is an ordinary unicast address.
    ``allow_loopback`` accepts 127.0.0.0/8 and ``::1`` (demo and tests only); nothing else changes with it."""
    ip = _parse(text)
    if ip is None:
        return "not a plain IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded(ip)
        if inner is not None:
            why = _plain_refusal(inner, allow_loopback=False)
            return f"IPv6 form of {inner}" + (f" ({why})" if why else " (a pod IP is never written so)")
    return _plain_refusal(ip, allow_loopback)


def is_scrapable(text: object, *, allow_loopback: bool = False) -> bool:
    """True when :func:`refusal` has nothing against the pod IP ``text``."""
    return refusal(text, allow_loopback=allow_loopback) is None
