"""The price book in the Django admin: admins add entries, bad ones are refused with the field's message."""

from costs.models import PriceEntry


def form(**overrides):
    return {"pattern": "*H200*", "usd_per_hour": "3.10", "usd_per_kwh": "0.11", "pue": "1.2",
            "effective_from": "2030-01-01", "note": "", **overrides}


def test_an_admin_adds_an_entry_and_sees_examples_labelled(client, admin_user):
    client.force_login(admin_user)

    resp = client.post("/admin/costs/priceentry/add/", form())
    listing = client.get("/admin/costs/priceentry/").content.decode()

    assert resp.status_code == 302
    assert PriceEntry.objects.filter(pattern="*H200*", effective_from="2030-01-01", is_example=False).exists()
    assert "EXAMPLE price" in listing and "example price shipped with Yardstick" in listing


def test_the_admin_refuses_a_pue_below_one_and_stores_nothing(client, admin_user):
    client.force_login(admin_user)
    before = PriceEntry.objects.count()

    resp = client.post("/admin/costs/priceentry/add/", form(pue="0.5"))

    assert resp.status_code == 200
    assert "pue must be a number &gt;= 1" in resp.content.decode()
    assert PriceEntry.objects.count() == before


def test_a_viewer_cannot_open_the_price_book_in_the_admin(client, viewer):
    client.force_login(viewer)
    assert client.get("/admin/costs/priceentry/").status_code == 302
