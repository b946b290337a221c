"""``python -m fxcut``: the fxcut command (see fxcut.tools.cli)."""

from .tools.cli import main

raise SystemExit(main())
