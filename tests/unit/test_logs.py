"""The JSON log format: one parseable object per record, extra fields kept."""

from __future__ import annotations

import json
import logging

from gatekeeper.controller.logs import JsonFormatter


def test_json_lines_carry_message_level_and_extra_fields() -> None:
    record = logging.LogRecord(
        "gatekeeper.reconciler", logging.INFO, __file__, 1, "admitted %s", ("g",), None
    )
    record.pool = "on-demand"
    line = JsonFormatter().format(record)
    data = json.loads(line)
    assert data["msg"] == "admitted g"
    assert data["level"] == "info"
    assert data["logger"] == "gatekeeper.reconciler"
    assert data["pool"] == "on-demand"
    assert "\n" not in line
