"""The launch plans the wrappers make, for tools that look at them instead of running them:
``capture_launches()`` records every plan a block of wrapper calls would launch (validation and
planning as usual, the device's tile configs, nothing run), each a ``LaunchPlan`` with its
kernel, grid, arguments, meta and where its tiles came from (``tuning``)."""
from ._checks import LaunchPlan, capture_launches

__all__ = ["LaunchPlan", "capture_launches"]
