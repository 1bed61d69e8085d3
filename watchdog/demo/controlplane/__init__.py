"""A real Kubernetes control plane on loopback, for ``demo --control-plane real`` and the ``cluster`` test tier.

etcd, kube-apiserver and kube-controller-manager are built from the official Go modules by
``tests/cluster/build_control_plane.sh`` (``make control-plane``); :mod:`.locate` finds them (and the chart),
:mod:`.plane` starts them, :mod:`.kubelet` plays the kubelet and scheduler (binds pods, serves a simulated vLLM
engine at each pod's loopback IP, finishes graceful deletions), :mod:`.tools` finds or fetches helm and kubectl,
:mod:`.chart` installs the chart with real helm and runs the watchdog as the chart's ServiceAccount,
:mod:`.workloads` makes namespaces and Deployments and reads Events, :mod:`.api` is the admin's JSON client.
:mod:`.story` and :mod:`.verdict` are the demo's story on it. Nothing here listens on or talks to anything but
127.0.0.0/8.

Like the rest of ``watchdog.demo`` this is demo and test machinery: production code never imports it.
"""
