"""Kubernetes API emulator for the demo and the tests (kmock-based; an emulator, never a cluster):
``server`` (the emulator and its HTTP server), ``selectors``, ``responses``, ``client`` (seeding), ``__main__``."""

from watchdog.demo.emulator.client import SEED_HEADER, EmulatorClient, EmulatorError
from watchdog.demo.emulator.server import RESOURCES, ApiRequest, EmulatorServer, KubeEmulator

__all__ = ["RESOURCES", "SEED_HEADER", "ApiRequest", "EmulatorClient", "EmulatorError", "EmulatorServer",
           "KubeEmulator"]
