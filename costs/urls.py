from django.urls import path

from costs import views

urlpatterns = [
    path("api/costs", views.costs, name="api-costs"),
    path("api/costs/jobs/<int:job_id>", views.job_costs, name="api-costs-job"),
]
