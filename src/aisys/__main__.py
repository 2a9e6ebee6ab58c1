"""`python -m aisys` is the `aisys` command."""

import sys

from .cli import main

sys.exit(main())
