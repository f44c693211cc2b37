"""What the bind form of an external job's page offers: every node with its devices."""

from django import template

from collector.models import Node

register = template.Library()


@register.simple_tag
def bind_choices():
    """[(node name, [Device, ...])], nodes by name, devices by index."""
    return [(n.name, list(n.devices.order_by("index"))) for n in Node.objects.order_by("name").prefetch_related("devices")]
