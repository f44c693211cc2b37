"""Email settings for alert notifications come from the environment; a bad one stops start-up naming it."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

READ = "from django.conf import settings; print(settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS, " \
       "settings.DEFAULT_FROM_EMAIL)"


def settings_with(service_dir, **env):
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {READ}"], cwd=ROOT, capture_output=True, text=True,
        timeout=60, env={**os.environ, "DJANGO_SETTINGS_MODULE": "yardstick.settings",
                         "YARDSTICK_DATA_DIR": str(service_dir), **env})


@pytest.mark.parametrize("env, message", [
    ({"EMAIL_PORT": "0"}, "EMAIL_PORT must be >= 1, got 0"),
    ({"EMAIL_HOST": "smtp://mail.example.com"}, "EMAIL_HOST must be a host name or address"),
    ({"DEFAULT_FROM_EMAIL": "yardstick"}, "DEFAULT_FROM_EMAIL must be an email address, got 'yardstick'"),
])
def test_a_bad_email_setting_stops_start_up_with_its_name_and_value(service_dir, env, message):
    result = settings_with(service_dir, **env)
    assert result.returncode != 0 and message in result.stderr


def test_email_settings_are_read_from_the_environment(service_dir):
    result = settings_with(service_dir, EMAIL_HOST="smtp.example.com", EMAIL_PORT="587", EMAIL_USE_TLS="true",
                           DEFAULT_FROM_EMAIL="alerts@example.com")
    assert result.stdout.split() == ["smtp.example.com", "587", "True", "alerts@example.com"], result.stderr
