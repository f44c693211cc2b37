from django.urls import path

from costs import views

urlpatterns = [
    path("api/costs", views.costs, name="api-costs"),
    path("api/costs/jobs/<int:job_id>", views.job_costs, name="api-costs-job"),
    path("api/costs/jobs/<int:job_id>/what-if", views.job_what_if, name="api-costs-what-if"),
]
