from django.urls import path

from sweeps import views

urlpatterns = [
    path("api/sweeps", views.sweeps_api, name="api-sweeps"),
    path("api/sweeps/<int:sweep_id>", views.sweep_api, name="api-sweep"),
    path("api/sweeps/<int:sweep_id>/stop", views.sweep_stop_api, name="api-sweep-stop"),
    path("api/sweeps/<int:sweep_id>/budget", views.sweep_budget_api, name="api-sweep-budget"),
    path("api/sweeps/<int:sweep_id>/again", views.sweep_again_api, name="api-sweep-again"),
    path("api/sweeps/<int:sweep_id>/more", views.sweep_more_api, name="api-sweep-more"),
    path("api/sweeps/<int:sweep_id>/repeat", views.sweep_repeat_api, name="api-sweep-repeat"),
    path("api/sweeps/<int:sweep_id>/csv", views.sweep_csv, name="api-sweep-csv"),
    path("sweeps", views.sweeps_page, name="sweeps"),
    path("sweeps/create", views.create_sweep, name="sweep-create"),
    path("sweeps/<int:sweep_id>", views.sweep_page, name="sweep"),
    path("sweeps/<int:sweep_id>/stop", views.stop_sweep, name="sweep-stop"),
    path("sweeps/<int:sweep_id>/budget", views.sweep_budget, name="sweep-budget"),
    path("sweeps/<int:sweep_id>/again", views.sweep_again, name="sweep-again"),
    path("sweeps/<int:sweep_id>/more", views.sweep_more, name="sweep-more"),
    path("sweeps/<int:sweep_id>/repeat", views.sweep_repeat, name="sweep-repeat"),
]
