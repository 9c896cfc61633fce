"""``python -m firn`` is the ``firn`` command."""

import sys

from firn.cli import main

sys.exit(main())
