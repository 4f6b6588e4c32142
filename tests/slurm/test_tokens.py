"""The daemon's slurmrestd tokens over a long run (`autoscaler.slurm.tokens`, `slurm.jwt_key_file` /
`slurm.jwt_file`): renewed before they expire, re-read when their file changes, refused config named by field.
Real slurmrestd accepting and refusing them: tests/slurm_source/test_slurmrestd.py (23.11) and
tests/e2e_22_05/test_slurmrestd_22_05.py (22.05)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import jwt
import pytest

from autoscaler.daemon.build import build_slurm
from autoscaler.daemon.config import ConfigError, parse_config
from autoscaler.slurm.client import RestSlurm, SlurmUnavailable
from autoscaler.slurm.tokens import SigningKey, StaticToken, TokenFile, token_expiry

KEY = b"0123456789abcdef0123456789abcdef"


def _key(tmp_path: Path, data: bytes = KEY) -> Path:
    path = tmp_path / "jwt_hs256.key"
    path.write_bytes(data)
    return path


def test_a_signed_token_carries_the_claims_slurmctld_checks_and_is_renewed_after_half_its_life(tmp_path) -> None:
    now = [1_800_000_000.0]
    key = SigningKey(_key(tmp_path), "slurm", lifespan_s=600, clock=lambda: now[0])
    first = key.token()
    claims = jwt.decode(first, KEY, algorithms=["HS256"], options={"verify_exp": False, "verify_iat": False})
    assert claims == {"iat": 1_800_000_000, "exp": 1_800_000_600, "sun": "slurm"}
    now[0] += 299
    assert key.token() == first  # still more than half its life left
    now[0] += 1
    renewed = key.token()
    assert renewed != first and token_expiry(renewed) == 1_800_000_900


def test_a_rotated_key_signs_the_next_token(tmp_path) -> None:
    path = _key(tmp_path)
    key = SigningKey(path, "slurm")
    before = key.token()
    new = b"fedcba9876543210fedcba9876543210"
    path.write_bytes(new)
    os.utime(path, ns=(1, 1))  # a different mtime, whatever the filesystem's clock resolution
    after = key.token()
    assert after != before and jwt.decode(after, new, algorithms=["HS256"])["sun"] == "slurm"


def test_a_short_or_missing_key_is_named(tmp_path) -> None:
    with pytest.raises(SlurmUnavailable, match=r"jwt_hs256\.key: 5 bytes; an HS256 key .* at least 32"):
        SigningKey(_key(tmp_path, b"short"), "slurm").token()
    with pytest.raises(SlurmUnavailable, match=r"slurm\.jwt_key_file .*gone\.key: No such file"):
        SigningKey(tmp_path / "gone.key", "slurm").token()


def test_a_token_file_is_read_again_when_it_changes(tmp_path) -> None:
    path = tmp_path / "slurm.jwt"
    path.write_text("SLURM_JWT=first\n")  # as `scontrol token` prints it
    tokens = TokenFile(path)
    assert tokens.token() == "first"
    path.write_text("second-token\n")  # or the bare token
    assert tokens.token() == "second-token"
    path.write_text("")
    with pytest.raises(SlurmUnavailable, match=r"slurm\.jwt_file .*: the file is empty"):
        tokens.token()


def test_each_request_carries_the_current_token(tmp_path) -> None:
    seen: list[str] = []

    def restd(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["X-SLURM-USER-TOKEN"])
        return httpx.Response(200, json={"nodes": [], "errors": []})

    path = tmp_path / "slurm.jwt"
    path.write_text("one")
    rest = RestSlurm("http://restd", token=TokenFile(path), api="v0.0.40")
    rest.client = httpx.Client(base_url="http://restd", transport=httpx.MockTransport(restd), auth=rest.client.auth)
    rest.nodes()
    path.write_text("two-two")
    rest.nodes()
    assert seen == ["one", "two-two"]


@pytest.mark.parametrize(
    ("body", "note"),
    [
        ({"errors": [{"error": "Unspecified error", "errno": -1}]}, "expired at 2020-"),  # 22.05
        ({"errors": [{"error_number": 1000, "error": "Unexpected message received"}]}, "expired at 2020-"),  # 23.11
        ({"errors": [{"error_number": 2017, "error": "Invalid node name specified"}]}, None),
    ],
)
def test_a_refused_token_is_named_only_when_the_error_is_slurmrestds_refusal(body: dict, note: str | None) -> None:
    token = jwt.encode({"iat": 1_577_836_000, "exp": 1_577_836_800, "sun": "slurm"}, KEY, algorithm="HS256")
    rest = RestSlurm("http://restd", token=StaticToken(token, "SLURM_JWT"), api="v0.0.40")
    transport = httpx.MockTransport(lambda _: httpx.Response(500, json=body))
    rest.client = httpx.Client(base_url="http://restd", transport=transport, auth=rest.client.auth)
    with pytest.raises(SlurmUnavailable) as ei:
        rest.nodes()
    if note:
        assert f"SLURM_JWT {note}" in str(ei.value)
    else:
        assert "SLURM_JWT" not in str(ei.value) and "Invalid node name" in str(ei.value)


def _rest_config(tmp_path: Path, **slurm: object) -> dict:
    return {"inventory": str(tmp_path / "inventory.json"), "slurm": {"mode": "rest", "rest_url": "http://x", **slurm}}


def test_rest_mode_token_config_is_refused_by_field(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JWT", raising=False)
    key, tok = _key(tmp_path), tmp_path / "slurm.jwt"
    tok.write_text("t")
    with pytest.raises(ConfigError, match="jwt_key_file and jwt_file exclude each other"):
        parse_config(_rest_config(tmp_path, jwt_key_file=str(key), jwt_file=str(tok)))
    with pytest.raises(ConfigError) as ei:
        build_slurm(parse_config(_rest_config(tmp_path)))
    assert ei.value.errors == [("slurm.jwt_key_file", "mode 'rest' needs a token: jwt_key_file, jwt_file or SLURM_JWT")]
    with pytest.raises(ConfigError) as ei:
        build_slurm(parse_config(_rest_config(tmp_path, jwt_key_file=str(_key(tmp_path, b"x" * 8)))))
    ((field, reason),) = ei.value.errors
    assert field == "slurm.jwt_key_file" and reason.startswith(f"{tmp_path}/jwt_hs256.key: 8 bytes"), reason


def test_a_signing_key_in_the_config_signs_for_rest_user(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_JWT", "from-the-environment")  # the config's key wins over the environment
    rest = build_slurm(parse_config(_rest_config(tmp_path, jwt_key_file=str(_key(tmp_path)), rest_user="fleet")))
    assert isinstance(rest, RestSlurm) and isinstance(rest.tokens, SigningKey)
    assert jwt.decode(rest.tokens.token(), KEY, algorithms=["HS256"])["sun"] == "fleet"
