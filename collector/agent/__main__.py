"""`python -m collector.agent --dsn ... --source nvml|host|dcgm|sim`."""

import sys

from .cli import main

sys.exit(main())
