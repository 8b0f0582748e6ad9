"""Credentials named in a scenario never reach ``metadata.json``."""

from __future__ import annotations

from testbed.redact import REDACTED, redacted


def test_credential_keys_are_redacted_everywhere() -> None:
    doc = {"services": [{"name": "s", "params": {"token": "t0p", "api_secret": "x",
                                                 "tokens": ["a", "b"], "password": "p",
                                                 "token_bucket_rate": 3, "port": 1,
                                                 "secret_file": None}}],
           "seed": 1}
    out = redacted(doc)
    params = out["services"][0]["params"]
    assert params["token"] == params["api_secret"] == params["tokens"] == REDACTED
    assert params["password"] == REDACTED
    assert params["token_bucket_rate"] == 3 and params["port"] == 1
    assert params["secret_file"] is None and out["seed"] == 1
    assert "t0p" not in repr(out) and doc["services"][0]["params"]["token"] == "t0p"


def test_only_credential_names_are_redacted_and_sequences_are_walked() -> None:
    doc = {"Auth_Token": "a", "run_secret": "b", "Authorization": "Bearer c", "api_key": "d",
           "apikey": "e", "secretary": "f", "tokenizer": "g", "sort_key": "h", "keys": 3,
           "nested": ({"token": "i"}, [{"passwd": "j"}]), 7: "k"}
    out = redacted(doc)
    assert [k for k, v in out.items() if v == REDACTED] == [
        "Auth_Token", "run_secret", "Authorization", "api_key", "apikey"]
    assert out["nested"] == [{"token": REDACTED}, [{"passwd": REDACTED}]]
    assert (out["secretary"], out["tokenizer"], out["sort_key"], out["keys"], out[7]) == \
        ("f", "g", "h", 3, "k")
