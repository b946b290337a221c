"""``python -m fxcut``: the fxcut command (see fxcut.cli)."""

from .cli import main

raise SystemExit(main())
