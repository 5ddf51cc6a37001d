"""The dropbox on disk: layout, file names, atomic moves, fsync, watching, recovery.

The store never imports the core: it knows files and directories, not consumers' policies.
"""

from __future__ import annotations
