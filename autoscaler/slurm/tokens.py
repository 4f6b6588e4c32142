"""Where the daemon's slurmrestd token comes from, for as long as the daemon runs.

slurmrestd's `rest_auth/jwt` takes a JWT per request (``X-SLURM-USER-TOKEN``), and every token expires: one from
``scontrol token`` lasts 1,800 s unless asked otherwise (slurmctld's DEFAULT_AUTH_TOKEN_LIFESPAN), so a daemon that
read its token once at start stops seeing Slurm half an hour later.  Three sources, all asked before each request:

- `SigningKey` (``slurm.jwt_key_file``): the daemon signs its own short-lived tokens with the cluster's HS256 key
  (``AuthAltParameters=jwt_key=``), as Slurm's JWT documentation describes for services that need tokens: claims
  ``iat``, ``exp`` and ``sun`` (the Slurm user name), the claims auth/jwt's `auth_p_token_generate` writes and
  `auth_p_verify` checks.  A fresh token when half the lifespan is gone; the key is read again when its file
  changes (a key rotation).  On the stacks' controller the key is `/var/spool/slurmctld/jwt_hs256.key`, owner slurm,
  the user the daemon runs as.
- `TokenFile` (``slurm.jwt_file``): a token someone else renews (a timer running ``scontrol token``); the file is
  read again whenever it changes.
- `StaticToken` (``SLURM_JWT``): the environment's, as set; it is not renewed.

Each names where its token came from (`origin`), so a token slurmrestd refuses is reported against that source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import jwt

from autoscaler.slurm.errors import SlurmUnavailable

#: the lifespan of a token the daemon signs: an hour, renewed after half of it
DEFAULT_LIFESPAN_S = 3600
#: a key shorter than this is refused (slurmctld's own key is 32 random bytes in the stacks; HS256 wants >= 32)
MIN_KEY_BYTES = 32


class TokenSource(Protocol):
    """A slurmrestd JWT for the next request, and where it came from (for errors)."""

    origin: str

    def token(self) -> str: ...


class StaticToken:
    """A token given once (``SLURM_JWT``, or a test's ``scontrol token``); never renewed."""

    def __init__(self, value: str, origin: str = "SLURM_JWT"):
        self._value = value
        self.origin = origin

    def token(self) -> str:
        return self._value


class _Watched:
    """A small file read again whenever its modification time, size or inode changes."""

    def __init__(self, path: Path, what: str):
        self.path = path
        self._what = what
        self._seen: tuple[int, int, int] | None = None
        self._data = b""

    def read(self) -> tuple[bytes, bool]:
        """The file's bytes, and whether they are new since the last call."""
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp == self._seen:
                return self._data, False
            data = self.path.read_bytes()
        except OSError as exc:
            raise SlurmUnavailable(f"{self._what} {self.path}: {exc.strerror or exc}") from exc
        self._seen, self._data = stamp, data
        return data, True


class TokenFile:
    """A token in a file another process renews; read again whenever the file changes."""

    def __init__(self, path: Path):
        self._file = _Watched(path, "slurm.jwt_file")
        self.origin = f"slurm.jwt_file {path}"
        self._token = ""

    def token(self) -> str:
        data, new = self._file.read()
        if new:
            text = data.decode(errors="replace").strip()
            # ``scontrol token`` prints SLURM_JWT=<token>: take either form
            self._token = text.removeprefix("SLURM_JWT=")
        if not self._token:
            raise SlurmUnavailable(f"{self.origin}: the file is empty (it must hold a slurmrestd JWT)")
        return self._token


class SigningKey:
    """Tokens the daemon signs itself for `user` with the cluster's HS256 key, `lifespan_s` each."""

    def __init__(
        self,
        path: Path,
        user: str,
        *,
        lifespan_s: int = DEFAULT_LIFESPAN_S,
        clock: Callable[[], float] = time.time,
    ):
        self._key = _Watched(path, "slurm.jwt_key_file")
        self.origin = f"a token signed with slurm.jwt_key_file {path}"
        self.user = user
        self.lifespan_s = lifespan_s
        self._clock = clock
        self._token = ""
        self._renew_at = 0.0

    def token(self) -> str:
        key, new = self._key.read()
        if len(key) < MIN_KEY_BYTES:
            raise SlurmUnavailable(
                f"slurm.jwt_key_file {self._key.path}: {len(key)} bytes; an HS256 key for slurmctld's auth/jwt "
                f"(AuthAltParameters=jwt_key=) has at least {MIN_KEY_BYTES}"
            )
        now = self._clock()
        if new or now >= self._renew_at:
            iat = int(now)
            claims = {"iat": iat, "exp": iat + self.lifespan_s, "sun": self.user}
            self._token = jwt.encode(claims, key, algorithm="HS256")
            self._renew_at = iat + self.lifespan_s / 2
        return self._token


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT, read without checking its signature (to say a refused token had expired); None
    when it has none or is not a JWT."""
    try:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return None
    return float(exp) if isinstance(exp, int | float) else None
