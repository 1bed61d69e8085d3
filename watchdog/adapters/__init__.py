"""Adapters: I/O that decides nothing (Kubernetes client, scrape, leader election, Events, node taints,
metrics, logs)."""
