"""The ``evstore`` command: a thin click shell over the library.

Installed as the package ``evstore_cli`` (from this ``cli/`` folder), with
the console script ``evstore = evstore_cli:main``.
"""

from ._common import EXIT_CODES
from ._main import cli, main

__all__ = ["EXIT_CODES", "cli", "main"]
