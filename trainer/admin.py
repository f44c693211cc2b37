"""Jobs in the Django admin: read-mostly. Jobs are started from the API or the pages;
here an admin can look, rename, and stop or resume through the same model methods."""

from django.contrib import admin, messages

from trainer.models import Job, StatusChange, Stint, Worker


class StatusChangeInline(admin.TabularInline):
    model = StatusChange
    extra = 0
    can_delete = False
    fields = readonly_fields = ("at", "from_status", "to_status", "reason")

    def has_add_permission(self, request, obj=None):
        return False


class StintInline(admin.TabularInline):
    model = Stint
    extra = 0
    can_delete = False
    fields = readonly_fields = ("node", "device", "device_name", "pid", "started_at", "ended_at", "end_reason",
                                "first_step", "last_step")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "team", "env", "status", "steps_done", "baseline_pass1", "latest_pass1",
                    "budget_usd", "created_by", "created_at")
    list_filter = ("status", "env", "team")
    search_fields = ("name", "team")
    readonly_fields = tuple(
        f for f in (
            "env", "config", "budget_usd", "device", "status", "error", "stop_requested", "budget_stop_requested",
            "not_resumable_reason", "heartbeat_at", "created_by", "created_at", "started_at", "finished_at",
            "steps_done", "checkpoint_step", "baseline_pass1", "latest_pass1", "latest_reward_mean",
        )
    )
    inlines = (StatusChangeInline, StintInline)
    actions = ("stop_jobs", "resume_jobs")

    def has_add_permission(self, request):
        return False  # a job needs a validated config: POST /api/jobs or the start form

    @admin.action(description="Stop selected jobs")
    def stop_jobs(self, request, queryset):
        done = sum(job.request_stop(by=request.user.username) for job in queryset)
        self.message_user(request, f"{done} of {queryset.count()} job(s) stopped or stopping.", messages.INFO)

    @admin.action(description="Resume selected jobs")
    def resume_jobs(self, request, queryset):
        done = sum(job.resume(by=request.user.username) for job in queryset)
        self.message_user(request, f"{done} of {queryset.count()} job(s) queued again.", messages.INFO)


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    """What each Celery worker reported (read-only: the workers write it; see trainer/workers.py)."""

    list_display = ("name", "host", "queues", "devices", "seen_at")
    fields = readonly_fields = ("name", "host", "queues", "devices", "seen_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
