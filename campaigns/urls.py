from django.urls import path

from campaigns import views

urlpatterns = [
    path("api/campaigns", views.campaigns_api, name="api-campaigns"),
    path("api/campaigns/<int:campaign_id>", views.campaign_api, name="api-campaign"),
    path("api/campaigns/<int:campaign_id>/runs", views.campaign_runs_api, name="api-campaign-runs"),
    path("api/campaigns/<int:campaign_id>/loop/start", views.loop_start_api, name="api-campaign-loop-start"),
    path("api/campaigns/<int:campaign_id>/loop/stop", views.loop_stop_api, name="api-campaign-loop-stop"),
    path("api/campaigns/<int:campaign_id>/csv", views.campaign_csv, name="api-campaign-csv"),
    path("campaigns", views.campaigns_page, name="campaigns"),
    path("campaigns/create", views.create_campaign, name="campaign-create"),
    path("campaigns/<int:campaign_id>", views.campaign_page, name="campaign"),
    path("campaigns/<int:campaign_id>/loop/start", views.start_loop, name="campaign-loop-start"),
    path("campaigns/<int:campaign_id>/loop/stop", views.stop_loop, name="campaign-loop-stop"),
    path("jobs/<int:job_id>/continue", views.continue_job, name="job-continue"),
]
