"""A stand-in for a training framework installed from pip (Accelerate, Lightning): the program
calls its helpers, and the collectives are issued from the framework's own lines. Copied into a
site-packages folder by tests/record/test_user_line.py."""

from fakefw.ops import Accelerator

__all__ = ["Accelerator"]
