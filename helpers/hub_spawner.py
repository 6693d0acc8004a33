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

Used by slurm/jupyterhub/jupyterhub_config.py; importing it needs batchspawner (the `hub` extra).
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time

from batchspawner import JobStatus, SlurmSpawner
from jupyterhub.spawner import SpawnException
from traitlets import Float, Unicode

# Slurm's answer for a job it no longer lists (purged after MinJobAge): the job is gone
GONE = re.compile(r"Invalid job id specified")


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

    async def _run_as_user(self, template: str, **extra) -> str:
        subvars = {**self.get_req_subvars(), "job_id": self.job_id, **extra}
        prefix = self.exec_prefix.format(**subvars)
        return await self.run_command(f"{prefix} {template.format(**subvars)}")

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
            log = await self._run_as_user("tail -n 6 " + shlex.quote(self.job_log), job_id=job_id)
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
