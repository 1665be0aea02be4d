"""The frozen, validated value every config section is, and what all sections share."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

DURATION_WITH_UNIT = re.compile(r"^\s*\d+(\.\d+)?\s*[a-zA-Z]+\s*$")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
