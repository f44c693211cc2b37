"""The campaign page's charts, as drawn from a summary: a run still running has no "end of run" line, and the cost per
point over time is dated to the second (runs of a CPU campaign end seconds apart: plotly's ticks went to the ms)."""

from types import SimpleNamespace

from campaigns.charts import cost_per_point, scores


def _run(n, status, usd, after):
    return {"n": n, "env": "arithmetic", "status": status, "cumulative_usd": usd, "after": after}


def test_only_ended_runs_are_marked_and_time_is_to_the_second():
    summary = {"start": {"arithmetic": 30.0}, "start_unscored": "", "projection": {},
               "runs": [_run(1, "completed", "0.004", {"arithmetic": 33.0}), _run(2, "running", "0.006", None)],
               "cost_usd": "0.006",
               "cost_per_point_over_time": [{"at": "2026-12-07T06:00:01+00:00", "usd_per_net_point": "0.0013", "n": 1},
                                            {"at": "2026-12-07T06:00:09+00:00", "usd_per_net_point": "0.0011", "n": 2}]}
    drawn = scores(SimpleNamespace(envs=["arithmetic"]), summary)
    assert [a["text"] for a in drawn["layout"]["annotations"]] == ["end of run 1 (arithmetic)"]
    assert [sh["x0"] for sh in drawn["layout"]["shapes"]] == [0.004]
    axis = cost_per_point(summary)["layout"]["xaxis"]
    assert (axis["type"], axis["tickformat"]) == ("date", "%b %-d, %H:%M:%S")
