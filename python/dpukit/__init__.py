"""dpukit: host-DPU co-designed offloads -- the Python front door.

The native tools (C++, built into ``build/bin``) do the work; this package
runs them, checks their results against ``result.schema.json`` and turns the
results into reports (``dpukit eval``).
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("dpukit")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+src"
