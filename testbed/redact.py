"""Secrets out of what a run writes down: ``metadata.json`` holds the resolved scenario,
and a scenario may still name a credential (a program without a parameter declaration
takes any ``--key value``). Values under a key that names one are replaced before the
document is written; the run secret itself never enters a scenario."""

from __future__ import annotations

import re
from typing import Any

#: Keys whose values are credentials (``token``, ``api_secret``, ``password``,
#: ``Authorization``, ``api_key`` ...); a name merely containing one (``tokenizer``,
#: ``sort_key``) is not.
SECRET_KEYS = re.compile(
    r"(^|_)(token|secret|password|passwd|credential|authorization|api_?key)s?$",
    re.IGNORECASE)
REDACTED = "<redacted>"


def redacted(document: Any) -> Any:
    """A copy of ``document`` with every credential-named key's value redacted."""
    if isinstance(document, dict):
        return {k: REDACTED if isinstance(k, str) and SECRET_KEYS.search(k) and v is not None
                else redacted(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [redacted(v) for v in document]
    return document
