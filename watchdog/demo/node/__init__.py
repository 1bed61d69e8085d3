"""A real one-node Kubernetes cluster inside a network namespace of its own (``kit``: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, containerd, runc, CNI, kubelet, kube-proxy), the images it runs
(``images``: the watchdog image's archive, a simulated-engine image, a pause image) and the engines' entrypoint
(``engine``). Shared by the node test tier (``tests/node``) and ``demo --control-plane real --node real``
(``story``). Linux, root, the binaries of ``make node`` and Debian's containerd/runc/CNI plugins only."""
