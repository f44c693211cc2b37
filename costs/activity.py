"""What a job's devices were doing while it held them: utilization, SM and tensor-core activity, and the share of
their samples whose clocks were held down (power cap, thermal, sync boost, HW slowdown).

Read from the minutes attribution charged to the job (costs_allocation) joined with the same minutes' rollups,
each minute weighted by the seconds the job held the device in it, so a job that shared a GPU sees the GPU as it
was while it held it. It lags attribution (about a minute), like the job's cost.
"""

from django.db import connection

from collector.models import Device

# A device whose clocks were held down for at least this share of the samples that report why is flagged.
THROTTLED_SHARE = 0.2

_ACTIVITY = """
SELECT a.device_id, sum(a.held_s),
       sum(r.util_mean_pct * a.held_s) / nullif(sum(a.held_s) FILTER (WHERE r.util_mean_pct IS NOT NULL), 0),
       sum(r.sm_active_mean_pct * a.held_s)
           / nullif(sum(a.held_s) FILTER (WHERE r.sm_active_mean_pct IS NOT NULL), 0),
       sum(r.tensor_active_mean_pct * a.held_s)
           / nullif(sum(a.held_s) FILTER (WHERE r.tensor_active_mean_pct IS NOT NULL), 0),
       sum(r.throttled_samples), sum(r.reasons_samples)
FROM costs_allocation a
JOIN telemetry_rollup_1m r ON r.device_id = a.device_id AND r.bucket = a.minute
WHERE a.job_id = %s AND a.held_s > 0
GROUP BY a.device_id
ORDER BY a.device_id
"""


def job_activity(job):
    """[{device (Device.to_dict with node), held_s, util_pct, sm_active_pct, tensor_active_pct, throttled_share
    (0..1), throttled_pct, throttled}] for each device the job was charged for; a figure the device does not
    report is None."""
    with connection.cursor() as cur:
        cur.execute(_ACTIVITY, [job.pk])
        rows = cur.fetchall()
    devices = {d.pk: d for d in Device.objects.filter(pk__in=[r[0] for r in rows]).select_related("node")}
    out = []
    for device_id, held_s, util, sm, tensor, throttled, reasons in rows:
        device = devices.get(device_id)
        if device is None:
            continue
        share = throttled / reasons if reasons else None
        out.append({"device": {**device.to_dict(), "node": device.node.name}, "held_s": float(held_s),
                    "util_pct": util, "sm_active_pct": sm, "tensor_active_pct": tensor,
                    "throttled_share": share, "throttled_pct": None if share is None else share * 100,
                    "throttled": share is not None and share >= THROTTLED_SHARE})
    return out
