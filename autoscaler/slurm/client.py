"""Talking to Slurm: the CLI (`squeue --json`, the per-node JSON of `fleet.slurm.nodes_json`, `scontrol update`) or
slurmrestd with a JWT.

Writes are node updates: a power/drain state (`update_nodes`) or a scheduling Weight (`update_weight`, the best
fit on the reservation: `autoscaler.core.weights`); and one job update: a pending job's hard constraint
(`update_job_features`, ``scontrol update jobid=<id> features=a|b``), which strict late binding widens when the
planner falls back to another machine type (`Policy.late_bind`); and a pending gang's excluded nodes
(`update_job_excluded_nodes`, ``ExcNodeList``: `autoscaler.core.gang_exclusion`) and release a gated gang
(`start_job_now`, ``StartTime=now``: `autoscaler.slurm.gang_gate`).

Both clients return the typed records of `readers` and raise `SlurmUnavailable` when the controller does not
answer (timeout, non-zero exit, connection refused), so the daemon can skip scale-down for that tick instead
of acting on a stale view.  The command runner is injectable, so tests can run the real CLI against the test
harness's slurmctld or feed recorded output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from autoscaler.slurm.errors import SlurmUnavailable
from autoscaler.slurm.hostlist import compress
from autoscaler.slurm.job_array import FULL_TASK_LIST_ENV
from autoscaler.slurm.readers import SlurmJob, SlurmNode, parse_sinfo, parse_squeue
from autoscaler.slurm.reservations import parse_rest_reservations, parse_scontrol_reservations
from autoscaler.slurm.tokens import StaticToken, TokenSource, token_expiry
from fleet.slurm.nodes_json import NodeSource

# scontrol node states the daemon sets (``scontrol update nodename=... state=...``); `down`: a preempted instance's
# node (autoscaler.daemon.tick `Daemon._preempted`)
NODE_UPDATE_STATES = frozenset({"down", "drain", "resume", "power_down", "power_down_force", "power_up", "undrain"})
# the states scontrol refuses without a reason ("You must specify a reason when DOWNING or DRAINING a node"): the
# clients send a default one when the caller gives none
REASON_REQUIRED = frozenset({"down", "drain"})
MAX_WEIGHT = 0xFFFFFFFD  # Weight is a uint32; 0xFFFFFFFE and 0xFFFFFFFF are Slurm's NO_VAL and INFINITE
# a job's hard constraint as the daemon writes it: feature names (what fleet.slurm.conf gives a node: machine GPU,
# machine type, capacity type) joined by "|" (any one of them); nothing scontrol or a shell could read more into
_FEATURES_RE = re.compile(r"[A-Za-z0-9_.-]+(?:\|[A-Za-z0-9_.-]+)*")
_NODE_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")


def check_weight(weight: object) -> int:
    """`weight` if it is a node Weight scontrol accepts (an int in 0..MAX_WEIGHT), else ValueError naming it."""
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= MAX_WEIGHT:
        raise ValueError(f"weight: {weight!r} is not an integer in 0..{MAX_WEIGHT}")
    return weight


def check_features(features: object) -> str:
    """`features` if it is feature names joined by ``|`` (``a3-highgpu-1g|a3-highgpu-8g``), else ValueError naming
    it."""
    if not isinstance(features, str) or not _FEATURES_RE.fullmatch(features):
        raise ValueError(f"features: {features!r} is not feature names ([A-Za-z0-9_.-]) joined by '|'")
    return features


def check_node_names(names: object) -> list[str]:
    """`names` if it is a sequence of node names ([A-Za-z0-9_.-]), else ValueError naming the bad one."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ValueError(f"names: {names!r} is not a list of node names")
    for n in names:
        if not isinstance(n, str) or not _NODE_NAME_RE.fullmatch(n):
            raise ValueError(f"names: {n!r} is not a node name ([A-Za-z0-9_.-])")
    return list(names)


def check_job_id(job_id: object) -> int:
    """`job_id` if it is a Slurm job id (a positive int), else ValueError naming it."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"job_id: {job_id!r} is not a positive integer")
    return job_id


def check_admin_comment(text: object) -> str:
    """`text` if it can be an AdminComment in one scontrol argument (printable, no space, quote or ``=``), else
    ValueError naming it."""
    if not isinstance(text, str) or not text or not text.isprintable() or any(c in text for c in " \t'\"="):
        raise ValueError(f"admin_comment: {text!r} is not one printable word without quotes or '='")
    return text


class SlurmClient(Protocol):
    def jobs(self) -> list[SlurmJob]: ...

    def nodes(self) -> list[SlurmNode]: ...

    def update_nodes(self, names: Sequence[str], state: str, reason: str | None = None) -> None: ...

    def update_weight(self, names: Sequence[str], weight: int) -> None: ...

    def update_job_features(self, job_id: int, features: str) -> None: ...

    def update_job_excluded_nodes(self, job_id: int, names: Sequence[str]) -> None: ...

    def start_job_now(self, job_id: int, excluded: Sequence[str] = ()) -> None: ...

    def defer_jobs(self, job_ids: Sequence[int], until: int, admin_comment: str) -> None: ...

    def reservations(self) -> dict[str, tuple[str, ...]]: ...


Runner = Callable[..., subprocess.CompletedProcess]


class CliSlurm:
    """The Slurm CLI on this host.  `env` adds e.g. SLURM_CONF for a test cluster.  squeue runs with
    ``SLURM_BITSTR_LEN=0``, so that it lists a pending job array's tasks whole (`autoscaler.slurm.job_array`)."""

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        conf: Path | None = None,
        timeout_s: float = 10.0,
        env: dict[str, str] | None = None,
        runner: Runner = subprocess.run,
    ) -> None:
        self.bin_dir = bin_dir
        self.timeout_s = timeout_s
        self.env = dict(os.environ, **FULL_TASK_LIST_ENV, **(env or {}))
        if conf is not None:
            self.env["SLURM_CONF"] = str(conf)
        self.runner = runner
        self._node_source = NodeSource()  # which command prints one JSON object per node (this Slurm's release)

    def _run(self, *args: str) -> str:
        exe = str(self.bin_dir / args[0]) if self.bin_dir else args[0]
        try:
            cp = self.runner(
                [exe, *args[1:]], capture_output=True, text=True, timeout=self.timeout_s, env=self.env, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailable(f"{args[0]} timed out after {self.timeout_s:g}s") from exc
        except OSError as exc:
            raise SlurmUnavailable(f"{args[0]}: {exc}") from exc
        if cp.returncode != 0:
            raise SlurmUnavailable(f"{' '.join(args)} exited {cp.returncode}: {cp.stderr.strip()[:300]}")
        return cp.stdout

    def _json(self, *args: str) -> dict[str, Any]:
        out = self._run(*args)
        try:
            return json.loads(out)
        except ValueError as exc:
            raise SlurmUnavailable(f"{args[0]} printed no JSON: {out[:200]!r}") from exc

    def jobs(self) -> list[SlurmJob]:
        return parse_squeue(self._json("squeue", "--json"))

    def nodes(self) -> list[SlurmNode]:
        """Every node, one JSON object each: `sinfo --json` on 22.05, `scontrol show nodes --json` from 23.02 on
        (`fleet.slurm.nodes_json`; the first grouped answer switches the source for good)."""
        try:
            return parse_sinfo(self._node_source.read(lambda argv: self._run(*argv)))
        except json.JSONDecodeError as exc:
            raise SlurmUnavailable(f"{self._node_source.command[0]} printed no JSON: {exc}") from exc

    def reservations(self) -> dict[str, tuple[str, ...]]:
        """Active advanced reservation name -> its nodes (``scontrol show reservation -o``: 22.05 has no JSON)."""
        return parse_scontrol_reservations(self._run("scontrol", "show", "reservation", "-o"))

    def update_nodes(self, names: Sequence[str], state: str, reason: str | None = None) -> None:
        if state not in NODE_UPDATE_STATES:
            raise ValueError(f"state: {state!r} is not one of {sorted(NODE_UPDATE_STATES)}")
        if not names:
            return
        args = ["scontrol", "update", f"nodename={compress(names)}", f"state={state}"]
        if reason or state in REASON_REQUIRED:
            args.append(f"reason={reason or 'gpu-fleet autoscaler'}")
        self._run(*args)

    def update_weight(self, names: Sequence[str], weight: int) -> None:
        """``scontrol update nodename=<names> weight=<weight>``: one call for all the names.  slurmctld keeps it
        until the next ``scontrol reconfigure`` or restart, which put slurm.conf's Weight back."""
        check_weight(weight)
        if not names:
            return
        self._run("scontrol", "update", f"nodename={compress(names)}", f"weight={weight}")

    def update_job_features(self, job_id: int, features: str) -> None:
        """``scontrol update jobid=<id> features=<expr>``: replace a pending job's hard constraint (``--constraint``),
        e.g. widen ``a3-highgpu-1g`` to ``a3-highgpu-1g|a3-highgpu-8g``.  slurmctld refuses a job that is no longer
        pending, an unknown job id and a feature no node has; that is a `SlurmUnavailable` naming the reason."""
        check_job_id(job_id)
        check_features(features)
        self._run("scontrol", "update", f"jobid={job_id}", f"features={features}")

    def update_job_excluded_nodes(self, job_id: int, names: Sequence[str]) -> None:
        """``scontrol update jobid=<id> ExcNodeList=<names>``: the nodes a pending job may not get (none: clear it).
        slurmctld refuses a job that is no longer pending; that is a `SlurmUnavailable` naming the reason."""
        check_job_id(job_id)
        checked = check_node_names(names)
        hostlist = compress(checked) if checked else ""
        self._run("scontrol", "update", f"jobid={job_id}", f"ExcNodeList={hostlist}")

    def start_job_now(self, job_id: int, excluded: Sequence[str] = ()) -> None:
        """``scontrol update jobid=<id> [ExcNodeList=<names>] StartTime=now``: release a pending job held by a
        BeginTime (the gang gate: `autoscaler.slurm.gang_gate`), kept off `excluded` (none: its exclusion is left as
        it is), in one update, so slurmctld's first try already sees the exclusion.  slurmctld refuses a job that is
        no longer pending; that is a `SlurmUnavailable` naming the reason."""
        check_job_id(job_id)
        checked = check_node_names(excluded)
        exclusion = [f"ExcNodeList={compress(checked)}"] if checked else []
        self._run("scontrol", "update", f"jobid={job_id}", *exclusion, "StartTime=now")

    def defer_jobs(self, job_ids: Sequence[int], until: int, admin_comment: str) -> None:
        """``scontrol update jobid=<id,id,...> StartTime=<until> AdminComment=<comment>``: pending jobs' BeginTime
        moved to `until` (epoch seconds, written in this host's local time, as scontrol reads it) and their
        AdminComment set, in one call (the gang gate's lease: `autoscaler.slurm.gang_gate`).  slurmctld updates the
        jobs it can and names each it refused (a job that started or left) on stderr: a `SlurmUnavailable`."""
        ids = [check_job_id(j) for j in job_ids]
        if not ids:
            return
        if isinstance(until, bool) or not isinstance(until, int) or until <= 0:
            raise ValueError(f"until: {until!r} is not a positive epoch second")
        check_admin_comment(admin_comment)
        begin = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(until))
        self._run("scontrol", "update", f"jobid={','.join(map(str, ids))}", f"StartTime={begin}",
                  f"AdminComment={admin_comment}")  # fmt: skip


#: `slurm.rest_api: auto`: the newest of the versions the daemon's readers and updates were run against on a real
#: slurmrestd that the running one serves: v0.0.38 (22.05.8's openapi/v0.0.38: tests/e2e_22_05/test_slurmrestd_22_05.py)
#: and v0.0.40 (23.11.4's openapi/slurmctld, which serves only v0.0.40: tests/slurm_source/test_slurmrestd.py)
AUTO = "auto"
CHECKED_APIS = ("v0.0.38", "v0.0.40")
# openapi versions without a node-update endpoint (it appeared in v0.0.39): updates go through scontrol
_NO_NODE_UPDATE = frozenset({"v0.0.36", "v0.0.37", "v0.0.38"})
# openapi versions whose job update (``POST job/{id}``, body: the job properties, ``constraints``) was run against
# a real slurmrestd (22.05.8: tests/slurm/test_job_features.py); the others' bodies differ or are unchecked, so
# their job updates go through scontrol
_REST_JOB_UPDATE = frozenset({"v0.0.38"})
# the node update's `state` flags for each state scontrol takes (v0.0.39+ `update_node_msg.state`, an array of
# node state flags): scontrol's POWER_DOWN_FORCE is two flags (update_node.c, 23.11: NODE_STATE_POWER_DOWN |
# NODE_STATE_POWERED_DOWN), the others one of the same name (DOWN: the base state, which slurmrestd parses as
# scontrol does, with the reason slurmctld wants beside it)
_REST_NODE_STATES = {s: [s.upper()] for s in NODE_UPDATE_STATES} | {"power_down_force": ["POWER_DOWN", "POWERED_DOWN"]}


def _version_key(api: str) -> tuple[int, ...]:
    return tuple(int(x) for x in api[1:].split("."))


def _apis_in(response: Any) -> list[str]:
    """The Slurm API versions an ``/openapi/v3`` response lists (its `/slurm/vX.Y.Z/` paths), oldest first; [] when
    the body is no OpenAPI document."""
    try:
        doc = response.json()
    except ValueError:
        return []
    paths = doc.get("paths") if isinstance(doc, dict) else None
    found = {m.group(1) for p in paths or () if isinstance(p, str) and (m := re.match(r"/slurm/(v\d+\.\d+\.\d+)/", p))}
    return sorted(found, key=_version_key)


def _errors(response: Any) -> list[Any]:
    """The ``errors`` of a slurmrestd response body, numbered errors before notes ([] when none or not JSON)."""
    try:
        body = response.json()
    except ValueError:
        return []
    errs = list(body.get("errors") or ()) if isinstance(body, dict) else []
    return sorted(errs, key=lambda e: not _numbered(e))


#: how slurmrestd reports a request slurmctld refused for its token (expired, another key, an unknown user), as
#: measured on real slurmrestd (tests/slurm_source/test_slurmrestd.py): HTTP 500 with 22.05's "Unspecified error"
#: (errno -1) or 23.11's SLURM_UNEXPECTED_MSG_ERROR (error_number 1000, "Unexpected message received")
_AUTH_REFUSAL_ERRORS = (("errno", -1), ("error_number", 1000))


def _looks_refused(error: Any) -> bool:
    """A slurmrestd error entry of the kind a refused token gives (`_AUTH_REFUSAL_ERRORS`)."""
    return isinstance(error, dict) and any(error.get(k) == v for k, v in _AUTH_REFUSAL_ERRORS)


def _numbered(error: Any) -> bool:
    """A slurmrestd error entry that reports a failure (an error number or code), not a note."""
    return isinstance(error, dict) and bool(error.get("error_number") or error.get("error_code"))


class RestSlurm:
    """slurmrestd with JWT auth: ``X-SLURM-USER-NAME`` / ``X-SLURM-USER-TOKEN``.

    `api`: the openapi version, or `AUTO` (the default): the newest of `CHECKED_APIS` the running slurmrestd serves,
    read from its own ``/openapi/v3`` at the first call (and again if slurmrestd later stops serving it: an upgrade).
    Reads go to slurmrestd.  Slurm 22.05's openapi (<= v0.0.38) cannot update nodes, so `update_nodes` and
    `update_weight` then run scontrol through `cli` (the daemon lives on the controller host, where scontrol works);
    v0.0.39+ use slurmrestd's node update.  `update_job_features` uses v0.0.38's job update; other versions run
    scontrol through `cli`."""

    def __init__(
        self,
        url: str,
        *,
        token: str | TokenSource,
        user: str = "slurm",
        api: str = AUTO,
        timeout_s: float = 10,
        cli: CliSlurm | None = None,
    ):
        import httpx

        self._httpx = httpx
        self.auto = api == AUTO
        self._api = None if self.auto else api
        self.cli = cli
        self.tokens: TokenSource = StaticToken(token, "the given token") if isinstance(token, str) else token
        self.client = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"X-SLURM-USER-NAME": user},
            auth=_token_auth(self.tokens),
            timeout=timeout_s,
        )

    def _token_note(self, status: int, errors: list[Any]) -> str:
        """What the error of a failed request (its HTTP `status` and slurmrestd's `errors`) adds about the token:
        slurmrestd passes the token to slurmctld, which refuses an expired or foreign one, and slurmrestd then
        answers HTTP 500 with a generic error (`_AUTH_REFUSAL_ERRORS`); "" for other failures."""
        if status not in (401, 403) and not any(_looks_refused(e) for e in errors):
            return ""
        try:
            expiry = token_expiry(self.tokens.token())
        except SlurmUnavailable:
            expiry = None
        if expiry is not None and expiry <= time.time():
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expiry))
            return f": {self.tokens.origin} expired at {when}"
        return (
            f" (what slurmrestd answers when slurmctld refuses the token: is {self.tokens.origin} signed with "
            "slurm.conf's AuthAltParameters jwt_key, for a user Slurm knows?)"
        )

    @property
    def api(self) -> str:
        """The openapi version in use (with `AUTO`, chosen from what slurmrestd serves at the first call)."""
        if self._api is None:
            self._api = self._negotiate()
        return self._api

    def _negotiate(self) -> str:
        """The newest of `CHECKED_APIS` slurmrestd serves, else `SlurmUnavailable` naming what it serves."""
        try:
            r = self.client.get("/openapi/v3")
        except self._httpx.HTTPError as exc:
            raise SlurmUnavailable(f"slurmrestd /openapi/v3: {exc}") from exc
        if r.status_code >= 400:
            raise SlurmUnavailable(f"slurmrestd /openapi/v3 (to choose slurm.rest_api 'auto'): HTTP {r.status_code}")
        served = _apis_in(r)
        usable = [a for a in CHECKED_APIS if a in served]
        if not usable:
            what = f"it serves {', '.join(served)}" if served else "its /openapi/v3 lists none"
            raise SlurmUnavailable(
                f"slurmrestd at {self.client.base_url}: slurm.rest_api 'auto' found none of the API versions gpu-fleet "
                f"was checked against ({', '.join(CHECKED_APIS)}; {what}): set slurm.rest_api to one it serves, "
                "or use slurm.mode 'cli'"
            )
        return usable[-1]

    def _call(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        api = self.api
        try:
            r = self.client.request(method, f"/slurm/{api}/{path}", **kw)
        except self._httpx.HTTPError as exc:
            raise SlurmUnavailable(f"slurmrestd {path}: {exc}") from exc
        if r.status_code == 404 and (served := self._served_apis()) and api not in served:
            if self.auto:
                self._api = None  # slurmrestd changed (an upgrade): choose again at the next call
            raise SlurmUnavailable(
                f"slurmrestd at {self.client.base_url} serves no API {api} (it serves {', '.join(served)}; "
                "Slurm 23.11's openapi/slurmctld serves v0.0.40 only): set slurm.rest_api to one of them, or 'auto'"
            )
        if r.status_code >= 400:
            # slurmrestd's error body opens with ~200 characters of "meta": name the error it reports instead
            errs = _errors(r)
            what = errs[0] if errs else r.text[:200]
            raise SlurmUnavailable(
                f"slurmrestd {path}: HTTP {r.status_code} {what}{self._token_note(r.status_code, errs)}"
            )
        body = r.json() if r.content else {}
        errs = [e for e in body.get("errors") or () if _numbered(e)]
        if errs:
            raise SlurmUnavailable(f"slurmrestd {path}: {errs[0]}")
        return body

    def _served_apis(self) -> list[str]:
        """The Slurm API versions slurmrestd's own OpenAPI document lists (its `/slurm/vX.Y.Z/` paths); [] when it
        cannot be read."""
        try:
            return _apis_in(self.client.get("/openapi/v3"))
        except self._httpx.HTTPError:
            return []

    def jobs(self) -> list[SlurmJob]:
        return parse_squeue(self._call("GET", "jobs"))

    def nodes(self) -> list[SlurmNode]:
        return parse_sinfo(self._call("GET", "nodes"))

    def reservations(self) -> dict[str, tuple[str, ...]]:
        """Active advanced reservation name -> its nodes (``GET reservations``)."""
        return parse_rest_reservations(self._call("GET", "reservations"), time.time())

    def update_nodes(self, names: Sequence[str], state: str, reason: str | None = None) -> None:
        if state not in NODE_UPDATE_STATES:
            raise ValueError(f"state: {state!r} is not one of {sorted(NODE_UPDATE_STATES)}")
        if self.api in _NO_NODE_UPDATE:
            if self.cli is None:
                raise SlurmUnavailable(f"slurmrestd {self.api} cannot update nodes and no scontrol fallback is set")
            self.cli.update_nodes(names, state, reason)
            return
        body: dict[str, Any] = {"state": _REST_NODE_STATES[state]}
        if reason or state in REASON_REQUIRED:
            body["reason"] = reason or "gpu-fleet autoscaler"
        self._update_nodes(names, body)

    def _update_nodes(self, names: Sequence[str], body: dict[str, Any]) -> None:
        """One ``POST node/<hostlist>`` for all the names, as scontrol sends one update: slurmctld then calls
        ResumeProgram once for a power-up of several names, so a gang's nodes reach the daemon as one request (one
        call per name split a gang into single launches: tests/e2e/test_rest_mode.py on 23.11).  slurmrestd takes a
        hostlist expression in the path, URL-encoded (checked on 23.11's)."""
        checked = check_node_names(names)
        if checked:
            self._call("POST", f"node/{quote(compress(checked), safe='')}", json=body)

    def update_weight(self, names: Sequence[str], weight: int) -> None:
        """The node-update endpoint (v0.0.39+: ``weight`` is a ``uint32_no_val``), else scontrol through `cli`."""
        check_weight(weight)
        if self.api in _NO_NODE_UPDATE:
            if self.cli is None:
                raise SlurmUnavailable(f"slurmrestd {self.api} cannot update nodes and no scontrol fallback is set")
            self.cli.update_weight(names, weight)
            return
        self._update_nodes(names, {"weight": {"set": True, "infinite": False, "number": weight}})

    def update_job_features(self, job_id: int, features: str) -> None:
        """v0.0.38: ``POST job/<id>`` with ``{"constraints": <expr>}`` (checked on a real slurmrestd 22.05.8, which
        sets the job's features as scontrol does); other openapi versions: scontrol through `cli`."""
        check_job_id(job_id)
        check_features(features)
        if self.api not in _REST_JOB_UPDATE:
            self._scontrol("job updates").update_job_features(job_id, features)
            return
        self._call("POST", f"job/{job_id}", json={"constraints": features})

    def update_job_excluded_nodes(self, job_id: int, names: Sequence[str]) -> None:
        """scontrol through `cli` (the job update body of no slurmrestd version was checked for it)."""
        check_job_id(job_id)
        check_node_names(names)
        self._scontrol("job exclusions").update_job_excluded_nodes(job_id, names)

    def start_job_now(self, job_id: int, excluded: Sequence[str] = ()) -> None:
        """scontrol through `cli` (the job update body of no slurmrestd version was checked for it)."""
        check_job_id(job_id)
        check_node_names(excluded)
        self._scontrol("job releases").start_job_now(job_id, excluded)

    def defer_jobs(self, job_ids: Sequence[int], until: int, admin_comment: str) -> None:
        """scontrol through `cli` (a list of jobs in one update; no slurmrestd version takes one)."""
        for j in job_ids:
            check_job_id(j)
        check_admin_comment(admin_comment)
        self._scontrol("job deferrals").defer_jobs(job_ids, until, admin_comment)

    def _scontrol(self, what: str) -> CliSlurm:
        """`cli`, for the updates (`what`) that go through scontrol; SlurmUnavailable naming them without one."""
        if self.cli is None:
            raise SlurmUnavailable(f"slurmrestd {self.api}: {what} go through scontrol and no cli is set")
        return self.cli


def _token_auth(source: TokenSource) -> Any:
    """An httpx auth that puts `source`'s current token on each request (``X-SLURM-USER-TOKEN``): a renewed or
    rotated token is used from the next request on."""
    import httpx

    class TokenAuth(httpx.Auth):
        def auth_flow(self, request: httpx.Request) -> Any:
            request.headers["X-SLURM-USER-TOKEN"] = source.token()
            yield request

    return TokenAuth()
