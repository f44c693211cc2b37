"""What the collector tells apps above it, without importing them.

`imported` is sent after an import of telemetry people already had (collector/importer.py) has
rolled up the window it wrote, with `lo` and `hi` (the whole minutes it covers, UTC) and `now`.
A receiver brings that window into its own figures and may return a summary of what it did: costs
attributes the window, so the cost review shows a year-old log at once (the periodic tasks only
look a few minutes back), and returns attribute_window's {"from", "to", "rows"}.
"""

from django.dispatch import Signal

imported = Signal()
