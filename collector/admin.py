"""Nodes in the Django admin (admin role): who owns each, i.e. which team pays for its idle time.

Agents register nodes and devices, so the admin neither adds nor deletes them; it edits the owner team
(the `team` label, through Node.set_owner, the same rule as the node page's form). The other labels and
the devices are shown read-only.
"""

from django import forms
from django.contrib import admin
from django.db.models import Count

from collector.models import Device, Node


class NodeForm(forms.ModelForm):
    owner_team = forms.CharField(
        required=False, max_length=Node.OWNER_MAX, label="Owner team",
        help_text="charged for this node's idle time (its `team` label); empty: unassigned. "
                  "An agent started with --label team=... sets it again when it registers.")

    class Meta:
        model = Node
        fields = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["owner_team"].initial = self.instance.owner or ""

    def clean_owner_team(self):
        try:
            return Node.clean_owner(self.cleaned_data.get("owner_team"))
        except ValueError as err:
            raise forms.ValidationError(str(err)) from None


class DeviceInline(admin.TabularInline):
    model = Device
    fields = ("index", "label", "model", "uuid", "source", "simulated", "power_estimated")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    form = NodeForm
    list_display = ("name", "owner_display", "device_count", "interval_s", "first_seen")
    search_fields = ("name",)
    readonly_fields = ("name", "labels", "interval_s", "first_seen", "registered_at")
    fields = ("name", "owner_team", "labels", "interval_s", "first_seen", "registered_at")
    inlines = [DeviceInline]

    @admin.display(description="owner team")
    def owner_display(self, obj):
        return obj.owner or "— (unassigned)"

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(n_devices=Count("devices"))

    @admin.display(description="devices", ordering="n_devices")
    def device_count(self, obj):
        return obj.n_devices

    def save_model(self, request, obj, form, change):
        obj.set_owner(form.cleaned_data["owner_team"])

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
