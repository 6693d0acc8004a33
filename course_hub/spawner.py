"""The hub's spawner for a class: batchspawner's SlurmSpawner, with the failures a class meets
handled and said in words a learner can act on.

- A status query that fails (squeue timing out, the controller restarting, a full process
  table) means "not known", never "stopped": only Slurm's own answer that the job is gone or
  ended stops a server. batchspawner 1.3 reads any error it has no pattern for as "stopped"
  and the hub forgets a server that still runs (batchspawner#315).
- A job that ends before its server reports in is noticed within seconds and reported with
  Slurm's state, reason and exit code and the end of the job's log. batchspawner 1.3 waits
  for the start timeout once the job has started (batchspawner#253).
- A job still queued when the start timeout nears is cancelled, and the learner reads that it
  waited in the queue, how long, and Slurm's reason, instead of a bare "timeout".

And what a learner sends never reaches a shell of the hub's:
- batchspawner 1.3's hub API (`/hub/api/batchspawner`) copies every key of the JSON body onto the
  spawner with `setattr`, authenticated by the server's token, which every learner's kernel holds.
  `exec_prefix`, `batch_query_cmd` or `job_id` set that way ran as shell commands of the hub's
  account at the next poll. `ServerPortHandler` takes its place: a server reports its port, once,
  while it starts, and nothing else.
- Every command runs as an argument list (never through a shell), each configured template is
  split into words before the values go in, the user name and job id are checked, and the
  command gets a minimal environment (not the hub's: its crypt key or proxy token would be
  readable by the learner the command runs as).

Used by slurm/jupyterhub/jupyterhub_config.py; importing it needs batchspawner (the `hub` extra).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import time

from batchspawner import JobStatus, SlurmSpawner
from jupyterhub import apihandlers
from jupyterhub.apihandlers import APIHandler
from jupyterhub.spawner import SpawnException
from tornado import web
from traitlets import Float, Unicode

# Slurm's answer for a job it no longer lists (purged after MinJobAge): the job is gone
GONE = re.compile(r"Invalid job id specified")
# what may stand in a command the hub runs: a Unix account name and a Slurm job id
USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
JOB_ID = re.compile(r"[0-9]{1,12}")
# the whole environment of a command run as the learner (sbatch adds the server's own variables):
# nothing of the hub's (JUPYTERHUB_CRYPT_KEY, CONFIGPROXY_AUTH_TOKEN, ...) reaches the learner
COMMAND_ENV = ("PATH", "SLURM_CONF", "LANG", "LC_ALL", "TZ")
COMMAND_TIMEOUT = 60.0
BATCHSPAWNER_API = r"/api/batchspawner"


class ServerPortHandler(APIHandler):
    """The one thing a starting server tells the hub through batchspawner's API: its port.

    Replaces batchspawner's handler, which set any spawner attribute a server's token sent."""

    @web.authenticated
    def post(self):
        token = self.get_auth_token()
        spawner = next((s for s in self.current_user.spawners.values() if s.api_token == token), None)
        if spawner is None:
            raise web.HTTPError(403, "only a server's own token reports its port")
        body = self.get_json_body()
        if not isinstance(body, dict) or set(body) != {"port"}:
            self.log.warning("batchspawner API: %s sent %s, refused (a server reports its port only)",
                             self.current_user.name, sorted(body) if isinstance(body, dict) else type(body).__name__)
            raise web.HTTPError(400, "a server reports its port and nothing else")
        port = body["port"]
        if type(port) is not int or not 1 <= port <= 65535:
            raise web.HTTPError(400, "port must be a whole number from 1 to 65535")
        if spawner.pending != "spawn" or spawner.port:
            self.log.warning("batchspawner API: %s reported port %s outside its server's start, refused",
                             self.current_user.name, port)
            raise web.HTTPError(409, "the port is reported once, while the server starts")
        spawner.port = port
        self.set_status(201)
        self.finish(json.dumps({"message": "port recorded"}))


def close_batchspawner_api(handlers: list | None = None) -> None:
    """Put ServerPortHandler where batchspawner's handler was (before the hub builds its routes).

    Fails closed: if batchspawner's handler is not found at its route (a later batchspawner moved
    or renamed it), the hub does not start, rather than run with an open route the course missed."""
    from batchspawner.api import BatchSpawnerAPIHandler

    handlers = apihandlers.default_handlers if handlers is None else handlers
    upstream = [h for h in handlers if isinstance(h[1], type) and issubclass(h[1], BatchSpawnerAPIHandler)]
    closed = [h for h in handlers if h[0] == BATCHSPAWNER_API and h[1] is ServerPortHandler]
    moved = [h[0] for h in upstream if h[0] != BATCHSPAWNER_API]
    if moved or not (upstream or closed):
        where = f"at {', '.join(moved)}" if moved else "nowhere in JupyterHub's API routes"
        raise RuntimeError(f"batchspawner's API handler is {where}, not at {BATCHSPAWNER_API} where the course "
                           "closes it: not starting the hub (check course_hub/spawner.py against this batchspawner)")
    handlers[:] = [h for h in handlers if h[0] != BATCHSPAWNER_API] + [(BATCHSPAWNER_API, ServerPortHandler)]


close_batchspawner_api()  # importing this module (the hub's config does) closes it


def command(template: str, values: dict[str, str]) -> list[str]:
    """A configured command template as an argument list: split into words first, then each word
    filled in, so that no value can add a word, a quote or a shell operator."""
    return [word.format(**values) for word in shlex.split(template)]


class CourseSlurmSpawner(SlurmSpawner):
    # state, node and pending reason in one query: the learner's progress shows the reason
    batch_query_cmd = Unicode("squeue -h -j {job_id} -o '%T %B %r'").tag(config=True)
    batch_cancel_cmd = Unicode("scancel {job_id}").tag(config=True)
    job_log = Unicode("{homedir}/jupyterhub-course-{job_id}.log",
                      help="The job's output file (server.sbatch.j2's --output), quoted when a start fails").tag(config=True)
    start_margin = Float(5.0, help="Seconds before start_timeout at which a queued job is cancelled "
                                   "with an explanation (JupyterHub's own timeout says only 'timeout')").tag(config=True)
    job_check_interval = Float(2.0, help="Seconds between checks that a started job still runs "
                                         "while its server starts").tag(config=True)

    # ------------------------------------------------------------------------ status
    async def query_job_status(self) -> JobStatus:
        if not self.job_id:
            self.job_status = ""
            return JobStatus.NOTFOUND
        try:
            out = await self._run_as_user(self.batch_query_cmd)
        except Exception as exc:  # noqa: BLE001 - any failure of the query itself
            error = str(exc.args[0] if exc.args else exc)
            if GONE.search(error):
                self.job_status = ""
                return JobStatus.NOTFOUND
            # keep job_status as it was: the job's state is not known, and a server is stopped
            # only on Slurm's word (batchspawner#315)
            self.log.warning("Slurm job %s: status query failed (%s); state unknown, asking again at the "
                             "next poll", self.job_id, error.strip()[:200] or type(exc).__name__)
            return JobStatus.UNKNOWN
        self.job_status = out
        if self.state_isrunning():
            return JobStatus.RUNNING
        if self.state_ispending():
            return JobStatus.PENDING
        return JobStatus.NOTFOUND  # no line (ended and purged) or an end state (COMPLETED, FAILED, ...)

    def _fields(self) -> list[str]:
        return (self.job_status or "").split(None, 2)

    def state_gethost(self) -> str:
        fields = self._fields()
        if len(fields) < 2 or fields[1] in ("n/a", "(null)"):
            raise RuntimeError(f"Slurm job {self.job_id} runs, but squeue names no node: {self.job_status!r}")
        return fields[1]

    def pending_reason(self) -> str:
        fields = self._fields()
        return fields[2].strip("()") if len(fields) == 3 else "not given"

    async def _run_as_user(self, template: str, input: str | None = None, env: dict | None = None,
                           **extra) -> str:
        values = {**self.get_req_subvars(), **extra}
        if not USER_NAME.fullmatch(values.get("username", "")):
            raise RuntimeError(f"user name {values.get('username')!r} is not a plain Unix account name")
        if "job_id" not in values and self.job_id:
            values["job_id"] = self.job_id
        if "job_id" in values and not JOB_ID.fullmatch(str(values["job_id"])):
            raise RuntimeError(f"Slurm job id {values['job_id']!r} is not a number")
        argv = command(self.exec_prefix, values) + command(template, values)
        base = {name: os.environ[name] for name in COMMAND_ENV if name in os.environ}
        return await self._run(argv, input, {**base, **(env or {})})

    async def _run(self, argv: list[str], input: str | None, env: dict[str, str]) -> str:
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(input.encode() if input else None), COMMAND_TIMEOUT)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise RuntimeError(f"{argv[0]} ... {shlex.join(argv[-3:])} took over {COMMAND_TIMEOUT:.0f} s") from None
        if proc.returncode != 0:
            raise RuntimeError(err.decode(errors="replace").strip() or f"exit status {proc.returncode}")
        return out.decode(errors="replace").strip()

    async def run_command(self, cmd, input=None, env=None):
        raise RuntimeError("the course's spawner runs no shell command (batchspawner's run_command)")

    async def submit_batch_script(self) -> str:
        """batchspawner's submit, without a shell and without user_options (the course has no
        options form; a learner's spawn request could otherwise fill the script's variables)."""
        subvars = self.get_req_subvars()
        subvars["cmd"] = self.cmd_formatted_for_batch()
        script = await self._get_batch_script(**subvars)
        out = await self._run_as_user(self.batch_submit_cmd, input=script, env=self.get_env())
        job_id = self.parse_job_id(out)
        if not JOB_ID.fullmatch(job_id or ""):
            raise RuntimeError(f"sbatch answered {out[-200:]!r}, not a job id")
        self.job_id = job_id
        self.log.info("Job submitted: %s", job_id)
        return job_id

    async def cancel_batch_job(self) -> None:
        self.log.info("Cancelling job %s", self.job_id)
        await self._run_as_user(self.batch_cancel_cmd)

    # ------------------------------------------------------------------------- start
    async def start(self):
        self.ip = self.traits()["ip"].default_value
        self.port = self.traits()["port"].default_value
        if self.server:
            self.server.port = self.port
        started = time.monotonic()
        deadline = started + max(1.0, self.start_timeout - self.start_margin)
        await self.submit_batch_script()
        if not self.job_id:
            raise _told("Slurm did not accept your server's job (no job id from sbatch); "
                                 "ask your instructor to check the hub's log", "submit")
        self._submitted = started
        while True:
            status = await self.query_job_status()
            if status == JobStatus.RUNNING:
                break
            if status == JobStatus.NOTFOUND:
                raise await self._ended("before it started your server")
            if time.monotonic() > deadline:
                raise await self._queue_timeout(time.monotonic() - started)
            await asyncio.sleep(self.startup_poll_interval)
        self.ip = self.state_gethost()
        checked = time.monotonic()
        while self.port == 0:  # set when the server reports in (batchspawner's hub API)
            await asyncio.sleep(self.startup_poll_interval)
            if time.monotonic() - checked >= self.job_check_interval:
                checked = time.monotonic()
                if await self.query_job_status() == JobStatus.NOTFOUND:
                    raise await self._ended(f"on {self.ip} before your server started")
            if time.monotonic() > deadline:
                raise await self._cancelled(
                    f"Your server's Slurm job {self.job_id} started on {self.ip}, but the server did not "
                    f"report in within {self.start_timeout:.0f} s; the job was cancelled.", reason="server-timeout")
        self.db.commit()
        self.log.info("Notebook server job %s started at %s:%s in %.1f s", self.job_id, self.ip, self.port,
                      time.monotonic() - started)
        return self.ip, self.port

    async def _queue_timeout(self, waited: float) -> SpawnException:
        return await self._cancelled(
            f"Your server's Slurm job {self.job_id} waited {waited:.0f} s in the queue without starting "
            f"(the hub waits at most {self.start_timeout:.0f} s); Slurm's reason: {self.pending_reason()}. "
            "The job was cancelled: try again in a few minutes, or ask your instructor (is the partition "
            "full, or the class reservation not active yet?).", reason="queue-timeout")

    async def _cancelled(self, message: str, reason: str) -> SpawnException:
        try:
            await self.cancel_batch_job()
        except Exception as exc:  # noqa: BLE001 - it may have ended meanwhile
            self.log.warning("cancelling Slurm job %s: %s", self.job_id, exc)
        self.clear_state()
        return _told(message, reason)

    async def _ended(self, when: str) -> SpawnException:
        """What Slurm and the job's log say about a job that ended too early."""
        job_id = self.job_id
        try:
            info = await self._run_as_user("scontrol show job -o {job_id}")
        except Exception:  # noqa: BLE001 - purged already (MinJobAge)
            info = ""
        fields = dict(re.findall(r"(JobState|Reason|ExitCode)=(\S+)", info))
        said = (f"state {fields.get('JobState', '?')}, reason {fields.get('Reason', '?')}, "
                f"exit code {fields.get('ExitCode', '?')}") if fields else "Slurm no longer lists it"
        try:
            log = await self._run_as_user("tail -n 6 {job_log}", job_id=job_id,
                                          job_log=self.job_log.format(homedir=self.get_req_subvars()["homedir"],
                                                                      job_id=job_id))
        except Exception:  # noqa: BLE001 - no log (the job never ran) or not readable by the hub
            log = ""
        message = f"Your server's Slurm job {job_id} ended {when} ({said})."
        if log.strip():
            message += " The end of its log: " + " | ".join(line.strip() for line in log.splitlines() if line.strip())
        self.clear_state()
        return _told(message, "job-ended")

    # -------------------------------------------------------------------------- stop
    async def stop(self, now: bool = False):
        if not self.job_id:  # a start that failed has cleared its job already
            return
        try:
            await super().stop(now=now)
        except Exception as exc:  # noqa: BLE001 - scancel of a job that just ended
            if await self.query_job_status() in (JobStatus.RUNNING, JobStatus.PENDING):
                raise
            self.log.info("Slurm job %s had ended already (%s)", self.job_id, exc)

    async def progress(self):
        while True:
            waited = time.monotonic() - getattr(self, "_submitted", time.monotonic())
            if self.state_ispending():
                yield {"message": f"Slurm job {self.job_id} pending in the queue for {waited:.0f} s "
                                  f"(Slurm's reason: {self.pending_reason()})"}
            elif self.state_isrunning():
                yield {"message": f"Slurm job {self.job_id} running on {self._fields()[1]}: "
                                  "waiting for your server to start"}
                return
            else:
                yield {"message": "Submitting your server's Slurm job ..."}
            await asyncio.sleep(1)


def _told(message: str, reason: str) -> SpawnException:
    """A failed spawn whose message the learner reads as it is (JupyterHub would otherwise show
    the exception's repr on the spawn page)."""
    exc = SpawnException(message, reason=reason, status_code=503)
    exc.jupyterhub_message = message
    return exc
