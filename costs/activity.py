"""What a job's devices were doing while it held them: utilization, SM and tensor-core activity, and the share of
their samples whose clocks were held down (power cap, thermal, sync boost, HW slowdown).

Read from the minutes attribution charged to the job (costs_allocation) joined with the same minutes' rollups,
each minute weighted by the seconds the job held the device in it, so a job that shared a GPU sees the GPU as it
was while it held it. It lags attribution (about a minute), like the job's cost.
"""

from collector import store
from collector.models import Device
from costs.models import Allocation
from trainer.models import Step

# A device whose clocks were held down for at least this share of the samples that report why is flagged.
THROTTLED_SHARE = 0.2
# A device this busy (utilization, %) whose tensor cores were busy less than IDLE_TENSOR_PCT of the time is
# flagged: kept busy without doing the matrix work it is paid for.
BUSY_PCT, IDLE_TENSOR_PCT = 50.0, 10.0


def job_activity(job):
    """[{device (Device.to_dict with node), held_s, util_pct, sm_active_pct, tensor_active_pct, throttled_share
    (0..1), throttled_pct, throttled, idle_tensor}] for each device the job was charged for; a figure the device
    does not report is None."""
    held = Allocation.objects.filter(job_id=job.pk, held_s__gt=0).values_list("device_id", "minute", "held_s")
    rows = store.held_activity(list(held))
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
                    "throttled": share is not None and share >= THROTTLED_SHARE,
                    "idle_tensor": util is not None and tensor is not None and util >= BUSY_PCT
                    and tensor < IDLE_TENSOR_PCT})
    return out


# Dense BF16 tensor-core peaks (TFLOP/s, no sparsity) from NVIDIA's data sheets, matched in this order against a
# device's model name. A model not listed (a CPU, a GPU whose figure is not published) has no MFU here.
PEAK_TFLOPS = (
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
)


def peak_flops(model):
    """The device's dense BF16 peak in FLOP/s, or None when PEAK_TFLOPS does not know its model."""
    for name, tflops in PEAK_TFLOPS:
        if name.lower() in model.lower():
            return tflops * 1e12
    return None


def job_mfu(job, activity):
    """The job's model FLOPs utilization beside what its devices did: {"mfu" (0..1 or None), "how", "why"}.

    Estimated (how "estimated"): the trainer's model FLOPs over its steps' seconds
    (performance/model_flops, timing/step_s), against the summed peak of the devices it was charged for
    (`activity`, job_activity's rows). Reported (how "reported"): the mean MFU the trainer logged
    (performance/mfu, e.g. veRL's perf/mfu/actor). `why` says what is missing when there is none.
    """
    reported, count, flops, seconds = Step.flops_totals(job)
    if count:
        return {"mfu": reported, "mfu_pct": 100 * reported, "how": "reported", "why": ""}
    if not seconds:
        return {"mfu": None, "how": "", "why": "no step reported its model FLOPs"}
    if not activity:
        return {"mfu": None, "how": "", "why": "no device charged to it yet"}
    peaks = [peak_flops(a["device"]["model"]) for a in activity]
    if None in peaks:
        unknown = next(a["device"] for a, p in zip(activity, peaks) if p is None)
        return {"mfu": None, "how": "", "why": f"no peak FLOP/s known for {unknown['model'] or unknown['label']}"}
    mfu = flops / seconds / sum(peaks)
    return {"mfu": mfu, "mfu_pct": 100 * mfu, "how": "estimated", "why": "",
            "achieved_tflops": flops / seconds / 1e12, "peak_tflops": sum(peaks) / 1e12}
