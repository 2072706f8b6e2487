"""Imports torch and the backend once in the test process: the ranks are
forked from it (see world.py) and start with both loaded."""

import causeway.torch  # noqa: F401
import torch  # noqa: F401
