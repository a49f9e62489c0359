"""The config parser on generated config.pbtxt text (pure, in-process: the parser has no server seam).

Invariant: ConfigError with a message, or a config that check_config refuses with a ConfigError, or one the
runtime can build a signature for and serve as JSON. Nothing else may escape.
"""

from __future__ import annotations

from ensemble_runtime.config import model_config as mcfg
from ensemble_runtime.validation import ModelSignature
from google.protobuf import json_format
from hypothesis import event, given

from tests.property.config_text import CONFIG_TEXT


def accept_or_refuse(text: str) -> str:
    """-> "refused" or "accepted"; raises whatever else escapes. The directory is named as the config says."""
    try:
        parsed = mcfg.parse_config_text(text)
        directory = parsed.name or "m"
        config = mcfg.apply_defaults(parsed, directory)
        mcfg.check_config(config, directory)
    except mcfg.ConfigError as exc:
        assert str(exc).strip(), "a ConfigError with no message"
        return "refused"
    ModelSignature.from_config(config)
    json_format.MessageToJson(config)  # an accepted config also serialises
    return "accepted"


@given(text=CONFIG_TEXT)
def test_config_text_is_parsed_or_refused(text: str) -> None:
    event(accept_or_refuse(text))
