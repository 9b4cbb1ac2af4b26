"""``python -m dasllama``: the ``dasllama`` command line (dasllama.cli.main), for environments
where the console script is not on PATH (a virtual environment not activated, ``pip install
--user`` without its bin folder on PATH)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
