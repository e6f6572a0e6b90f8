"""``python -m dpukit`` is the same as the ``dpukit`` command."""

import sys

from dpukit.cli import main

sys.exit(main())
