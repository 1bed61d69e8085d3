"""vllm-stall-watchdog: find vLLM pods whose engine silently wedged and delete them.

The import name ``watchdog`` is also used by an unrelated PyPI package (filesystem events); this project never
depends on it, and ``tests/test_package.py`` checks that ``import watchdog`` resolves here.
"""

__version__ = "0.3.0"
PROJECT_MARKER = "vllm-stall-watchdog"
