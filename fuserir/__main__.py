"""`python -m fuserir` runs the `fuserir` command."""

import sys

from .cli import main

sys.exit(main())
