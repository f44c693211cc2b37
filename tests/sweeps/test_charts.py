"""The sweep page's front, as drawn: a staircase through the trials nothing beats, in order of dollars, its corners
where those trials are now."""

from sweeps.charts import front


def _trial(number, usd, score):
    # Its newest score came at 90 % of its dollars; the rest was spent after (a last stretch, then the end).
    return {"number": number, "job_id": 10 + number, "params": {"lr": 1e-3}, "status": "completed",
            "stopped_by_sweep": False, "cost_usd": str(usd), "score": score, "on_front": True,
            "curve": [{"usd": usd / 2, "score": score / 2}, {"usd": usd * 0.9, "score": score}]}


def test_the_front_steps_up_where_a_dearer_trial_scores_more_whatever_order_the_trials_started_in():
    # Trial 0 (the defaults) cost more and scored more than trial 1: the score $0.0012 buys is trial 1's 1.2, and
    # only at $0.0014 does the front rise to 33.4. Drawn in trial order, it rose at $0.0012 (a score nobody bought).
    summary = {"trials": [_trial(0, 0.0014, 33.4), _trial(1, 0.0012, 1.2)], "front": [1, 0]}
    data = front(summary)["data"]
    drawn = next(t for t in data if t["name"].startswith("the front"))
    assert (drawn["x"], drawn["y"], drawn["line"]["shape"]) == ([0.0012, 0.0014], [1.2, 33.4], "hv")
    # Each trial's marker is at its newest score and all its dollars, on the front's corner; its curve runs on to it.
    markers = next(t for t in data if t["name"] == "completed")
    assert (markers["x"], markers["y"]) == ([0.0014, 0.0012], [33.4, 1.2])
    curve = next(t for t in data if t["name"] == "trial 0")
    assert (curve["x"][-2:], curve["y"][-2:]) == ([0.0014 * 0.9, 0.0014], [33.4, 33.4])
    # Each trial's line says whose it is: labelled where it ends, and on hover along it.
    assert curve["text"] == ["", "", "trial 0"] and "lines+text" == curve["mode"]
    assert curve["hovertemplate"].startswith("trial 0: ")
