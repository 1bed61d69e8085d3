"""The controller: the cycle, per-pod state, the remediator (the one deletion choke point), the service loop,
HTTP endpoints and the ports (Protocols) it wires the adapters through."""
