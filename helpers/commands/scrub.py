"""What `make site` removes from the executed lessons before publishing them: who ran them, where.

An executed lesson prints the doctor's `user@host`, the nodes its engines ran on, controller
addresses and ports, `TF_CONFIG`, home directories and Slurm job ids: a map of the cluster and
its users that a public site should not carry. Every string in the notebooks' outputs and
metadata is rewritten with placeholders: `<user>`, `<host>`, `<address>` (an IP address, or a
host with its port), `<port>`, `<job>`, `~` for a home directory and `<course>` for the checkout.

Names are found two ways: this machine's own (its host name, the user building the site, the
home directory), and every name the outputs themselves show in a context that says what it is
(`user@host`, `"host": ...`, `rank 0 on node1`, `"node1:12345"` in `TF_CONFIG`, Slurm's node
lists, `tcp://host:port`). A name found in one lesson is scrubbed in every lesson. Figures
(images) are not read: a host name drawn into a figure stays.
"""

from __future__ import annotations

import copy
import getpass
import os
import platform
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..errors import CourseError
from ..slurm.step import expand_hostlist

ROOT = Path(__file__).resolve().parents[2]
USER, HOST, ADDRESS, PORT, JOB = "<user>", "<host>", "<address>", "<port>", "<job>"
# names too common to replace wherever they appear as words: only in the contexts below
COMMON_WORDS = {"root", "user", "users", "admin", "test", "course", "node", "host", "jovyan", "localhost", "login",
                "tensorflow", "keras", "python", "python3", "pip", "git", "docker"}
LOOPBACK = ("127.0.0.1", "0.0.0.0", "localhost")

NAME = r"[A-Za-z][\w-]*(?:\.[A-Za-z0-9][\w-]*)*"
# user@host, not an image's repo/name@sha256:... nor a package's name@version
USER_AT_HOST = re.compile(rf"(?<![\w./-])([a-z_][\w.-]*)@(?!sha\d+\b|md5\b)({NAME})")
HOST_CONTEXTS = [
    re.compile(rf"[\"']?(?:host|hostname|node|nodename|BatchHost|SLURMD_NODENAME|SLURM_TOPOLOGY_ADDR)[\"']?"
               rf"\s*[:=]\s*[\"']?({NAME})", re.I),
    re.compile(rf"\brank \d+ on ({NAME})"),
    re.compile(rf"[\"']({NAME}):\d{{1,5}}[\"']"),  # TF_CONFIG's "node1:12345"
    re.compile(rf"\b(?:tcp|grpc|https?)://({NAME})"),
]
NODE_LISTS = re.compile(r"(?:NodeList|Nodes|SLURM_(?:JOB_|STEP_)?NODELIST)[\"']?\s*[=:]\s*[\"']?"
                        r"([A-Za-z][\w.\-\[\],]*[\w\]])")  # Slurm's spelling; a name, never a count
USER_CONTEXTS = [
    re.compile(r"(?:UserId|User|USER|LOGNAME|user|username)\s*[=:]\s*[\"']?([a-z_][\w.-]*)"),
    re.compile(r"/(?:home|Users|users|u)/([a-z_][\w.-]*)"),
]
HOME = re.compile(r"(?<![\w.])/(?:home|Users|users|u)/[a-z_][\w.-]*|(?<![\w.])/root(?![\w.-])")
IPV4 = re.compile(r"(?<![\w.])((?:\d{1,3}\.){3}\d{1,3})(?::(\d{1,5}))?(?![\w.])")
JOB_IDS = re.compile(r"(?i)((?<![a-z])job(?:_?id)?s?[\"']?\s*[=:#]?\s*[\"']?)(\d+)(?![\d.])")
JOB_FILES = re.compile(r"((?:slurm-|course-job|tf-course-engines-|tf-course-train-))(\d+)(?!\d)")
STEP_IDS = re.compile(r"(?i)((?<![a-z])(?:StepId=|steps? ))(\d+)(\.(?:\d+|batch|extern|interactive))(?![\d.]| ?m?s\b)")
TEXT_TYPES = ("text/html", "text/markdown", "image/svg+xml")  # rendered as markup: placeholders escaped


@dataclass
class Identities:
    """The user names and host names to scrub."""

    users: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    jobs: set[str] = field(default_factory=set)

    @classmethod
    def here(cls) -> "Identities":
        """The machine building the site, and the user building it."""
        users = {getpass.getuser(), os.environ.get("USER", ""), os.environ.get("LOGNAME", ""), Path.home().name}
        hosts = {socket.gethostname(), platform.node()}
        return cls({u for u in users if u}, {h for name in hosts if name for h in (name, name.split(".")[0])})

    def learn(self, text: str) -> None:
        """Add the names `text` shows in a context that says what they are."""
        for user, host in USER_AT_HOST.findall(text):
            self.users.add(user)
            self.hosts.add(host)
        found = [name for pattern in HOST_CONTEXTS for name in pattern.findall(text)]
        for listed in NODE_LISTS.findall(text):
            try:
                found += expand_hostlist(listed.strip(","))
            except CourseError:
                continue
        # a word after `host:` may be a word: only names with a digit or a dot count (node1, nid001234,
        # login.example.org), besides user@host's and this machine's own
        self.hosts.update(name for name in found if re.fullmatch(NAME, name) and re.search(r"[\d.]", name))
        for pattern in USER_CONTEXTS:
            self.users.update(pattern.findall(text))
        for match in JOB_IDS.finditer(text):
            self.jobs.add(match.group(2))
        self.hosts.update({h.split(".")[0] for h in self.hosts})
        self.hosts -= {*LOOPBACK, *COMMON_WORDS}


def scrub_text(text: str, names: Identities, markup: bool = False) -> str:
    """`text` with the names, addresses, ports, job ids and home directories replaced (in HTML or
    markdown, `markup`, the placeholders are escaped so that they show instead of vanishing as tags)."""
    text = text.replace(str(ROOT), "<course>")
    home = str(Path.home())
    if home not in ("/", ""):
        text = re.sub(rf"(?<![\w.]){re.escape(home)}(?![\w.-])", "~", text)
    text = HOME.sub("~", text)
    text = USER_AT_HOST.sub(f"{USER}@{HOST}", text)
    text = NODE_LISTS.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + HOST, text)
    text = re.sub(rf"\b(?:tcp|grpc|https?)://(?!{'|'.join(map(re.escape, LOOPBACK))})[^\s/\"',)]+",
                  lambda m: m.group(0).split("//")[0] + f"//{ADDRESS}", text)
    text = IPV4.sub(lambda m: _address(m.group(1), m.group(2)), text)
    hosts = sorted(names.hosts, key=len, reverse=True)
    if hosts:
        text = re.sub(rf"(?<![\w.-])(?:{'|'.join(map(re.escape, hosts))})(?:\.{NAME})?(?::\d{{1,5}})?(?![\w-])",
                      lambda m: ADDRESS if re.search(r":\d+$", m.group(0)) else HOST, text)
    text = re.sub(r"\b(localhost):\d{1,5}\b", rf"\1:{PORT}", text)
    text = re.sub(r"(?i)\b(port)(\s*[=:]?\s*)\d{2,5}\b(?!-\d)", rf"\1\2{PORT}", text)
    for pattern in USER_CONTEXTS[:1]:
        text = pattern.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + USER, text)
    users = sorted(u for u in names.users if u.lower() not in COMMON_WORDS and len(u) > 2)
    if users:
        text = re.sub(rf"(?<![\w.-])(?:{'|'.join(map(re.escape, users))})(?![\w-])", USER, text)
    text = STEP_IDS.sub(lambda m: m.group(1) + JOB + m.group(3) if m.group(2) in names.jobs or
                        m.group(1).lower() == "stepid=" else m.group(0), text)
    text = re.sub(r"(?<![\w.])\d+(?=\.(?:batch|extern|interactive)\b)", JOB, text)
    for pattern in (JOB_IDS, JOB_FILES):
        text = pattern.sub(rf"\g<1>{JOB}", text)
    if markup:
        for placeholder in (USER, HOST, ADDRESS, PORT, JOB, "<course>"):
            text = text.replace(placeholder, placeholder.replace("<", "&lt;").replace(">", "&gt;"))
    return text


def _address(ip: str, port: str | None) -> str:
    if ip in LOOPBACK:
        return f"{ip}:{PORT}" if port else ip
    return ADDRESS


def _binary(key) -> bool:
    """An image's base64 (read as text, a name inside it would be 'found' and the image broken)."""
    return isinstance(key, str) and key.startswith(("image/", "application/pdf")) and key not in TEXT_TYPES


def _strings(value) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if not _binary(key):
                yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _rewrite(value, names: Identities, markup: bool = False):
    if isinstance(value, str):
        return scrub_text(value, names, markup)
    if isinstance(value, dict):
        return {key: item if _binary(key) else _rewrite(item, names, markup or key in TEXT_TYPES)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_rewrite(item, names, markup) for item in value]
    return value


def _outputs_and_metadata(nb) -> list:
    """The parts of a notebook that execution wrote: outputs, cell and notebook metadata."""
    parts = [nb.get("metadata", {})]
    for cell in nb.get("cells", []):
        parts += [cell.get("metadata", {}), cell.get("outputs", [])]
    return parts


def scrub_notebooks(sources: list[Path], target: Path) -> list[Path]:
    """Scrubbed copies of the executed notebooks `sources`, written into `target`."""
    import nbformat

    notebooks = [nbformat.read(path, as_version=4) for path in sources]
    names = Identities.here()
    for nb in notebooks:
        for text in _strings(_outputs_and_metadata(nb)):
            names.learn(text)
    written = []
    for path, nb in zip(sources, notebooks):
        clean = copy.deepcopy(nb)
        clean.metadata = nbformat.from_dict(_rewrite(dict(clean.metadata), names))
        for cell in clean.cells:
            cell.metadata = nbformat.from_dict(_rewrite(dict(cell.metadata), names))
            if "outputs" in cell:
                cell.outputs = [nbformat.from_dict(_rewrite(dict(output), names)) for output in cell.outputs]
        out = target / path.name
        nbformat.write(clean, out)
        written.append(out)
    return written
