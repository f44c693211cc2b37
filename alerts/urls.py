from django.urls import path

from alerts import views

urlpatterns = [
    path("api/alerts", views.alerts_api, name="api-alerts"),
    path("api/alerts/<int:alert_id>/ack", views.ack_api, name="api-alert-ack"),
    path("api/alerts/<int:alert_id>/silence", views.silence_api, name="api-alert-silence"),
    path("api/alert-rules", views.rules_api, name="api-alert-rules"),
    path("api/alert-rules/<int:rule_id>", views.rule_api, name="api-alert-rule"),
    path("api/alert-channels", views.channels_api, name="api-alert-channels"),
    path("alerts", views.alerts_page, name="alerts"),
    path("alerts/<int:alert_id>/ack", views.acknowledge, name="alert-ack"),
    path("alerts/<int:alert_id>/silence", views.silence, name="alert-silence"),
    path("alerts/rules/create", views.create_rule, name="alert-rule-create"),
    path("alerts/rules/<int:rule_id>/edit", views.edit_rule, name="alert-rule-edit"),
    path("alerts/channels/create", views.create_channel, name="alert-channel-create"),
]
