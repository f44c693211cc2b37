"""The price book in the Django admin (admin role). Entries in force before today are read-only:
changing one would rewrite costs already reported; add a new entry from a new date instead."""

from django.contrib import admin, messages
from django.utils import timezone

from costs.models import PriceEntry
from costs.prices import EXAMPLE_NOTE


@admin.register(PriceEntry)
class PriceEntryAdmin(admin.ModelAdmin):
    list_display = ("pattern", "effective_from", "usd_per_hour", "usd_per_kwh", "pue", "example")
    list_filter = ("is_example",)
    search_fields = ("pattern", "note")
    ordering = ("pattern", "-effective_from")

    @admin.display(boolean=False, description="example?")
    def example(self, obj):
        return "EXAMPLE price" if obj.is_example else ""

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.effective_from < timezone.now().date():
            return ("pattern", "usd_per_hour", "usd_per_kwh", "pue", "effective_from", "created_at")
        return ("created_at",)

    def changelist_view(self, request, extra_context=None):
        if PriceEntry.objects.filter(is_example=True).exists():
            messages.warning(request, f"Entries marked EXAMPLE are {EXAMPLE_NOTE}.")
        return super().changelist_view(request, extra_context)
