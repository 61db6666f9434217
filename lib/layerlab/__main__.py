"""``python -m layerlab``: see :mod:`layerlab.cli`."""

from layerlab.cli import main

raise SystemExit(main())
