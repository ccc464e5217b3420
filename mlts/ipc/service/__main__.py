"""`python -m mlts.ipc.service`: see mlts.ipc.service.main."""

from __future__ import annotations

import sys

from mlts.ipc.service.main import main

sys.exit(main())
