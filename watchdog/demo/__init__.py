"""Demo and test infrastructure: a Kubernetes API emulator (kmock-based) and simulated vLLM pods on loopback."""
