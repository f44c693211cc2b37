from django.urls import path

from trainer import views

urlpatterns = [
    path("api/jobs", views.jobs, name="api-jobs"),
    path("api/jobs/<int:job_id>", views.job_detail, name="api-job"),
    path("api/jobs/<int:job_id>/stop", views.stop_job, name="api-job-stop"),
    path("api/jobs/<int:job_id>/stop-loss", views.stop_loss, name="api-job-stop-loss"),
    path("api/jobs/<int:job_id>/resume", views.resume_job, name="api-job-resume"),
    path("api/jobs/<int:job_id>/steps", views.job_steps, name="api-job-steps"),
    path("api/jobs/<int:job_id>/samples", views.job_samples, name="api-job-samples"),
    path("api/jobs/<int:job_id>/priority", views.priority, name="api-job-priority"),
    path("api/workers", views.workers, name="api-workers"),
    path("api/queue", views.queue_api, name="api-queue"),
    path("api/caps", views.caps, name="api-caps"),
]
