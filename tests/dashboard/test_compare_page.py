"""The compare page: eval score of several jobs against step, wall time or dollars; the IPD table."""

import json

from tests.dashboard import builders as b


def test_it_puts_dollars_on_the_x_axis_and_fills_the_table(viewer_client):
    cheap, dear = b.two_charged_jobs()
    resp = viewer_client.get(f"/compare?jobs={cheap.pk},{dear.pk}&x=usd")
    assert resp.status_code == 200
    fig = json.loads(resp.context["figures_json"])["compare"]
    assert fig["layout"]["xaxis"]["title"]["text"] == "cost (USD)"
    assert [t["name"] for t in fig["data"]] == [f"#{cheap.pk} cheap", f"#{dear.pk} dear"]
    assert fig["data"][0]["x"][-1] < fig["data"][1]["x"][-1], "the dear run spent more"
    table = {r["job"].pk: r for r in resp.context["table"]}
    assert table[cheap.pk]["cost_usd"] == "0.60" and table[dear.pk]["cost_usd"] == "1.80"
    assert table[cheap.pk]["gain_points"] == 10.0 and table[cheap.pk]["usd_per_point"] == "0.06"


def test_step_and_time_axes(viewer_client):
    cheap, dear = b.two_charged_jobs()
    by_step = json.loads(viewer_client.get(f"/compare?jobs={cheap.pk},{dear.pk}").context["figures_json"])
    assert by_step["compare"]["data"][0]["x"] == [0, 5, 10]
    by_time = json.loads(viewer_client.get(f"/compare?jobs={cheap.pk}&x=time").context["figures_json"])
    assert by_time["compare"]["layout"]["xaxis"]["title"]["text"].startswith("wall time")


def test_the_jobs_page_checkboxes_work_without_javascript(viewer_client):
    a, c = b.job(), b.job()
    resp = viewer_client.get(f"/compare?pick={a.pk}&pick={c.pk}")
    assert [j.pk for j in resp.context["jobs"]] == [a.pk, c.pk]


def test_bad_ids_are_named(viewer_client):
    resp = viewer_client.get("/compare?jobs=1,abc,999999&x=km")
    errors = resp.context["errors"]
    assert "x must be one of step, time, usd, got 'km'" in errors
    assert any("'abc'" in e for e in errors) and "no job 999999" in errors


def test_digits_that_are_not_ascii_are_named_not_a_500(viewer_client):
    # "²".isdigit() is True and int("²") raises: this was a ValueError (500).
    resp = viewer_client.get("/compare?jobs=%C2%B2,99999999999999999999999")
    assert resp.status_code == 400
    assert resp.context["errors"] == ["jobs must be job ids separated by commas, like 1,2,3; got '²'",
                                      "jobs must be job ids separated by commas, like 1,2,3; got '99999999999999999999999'"]
