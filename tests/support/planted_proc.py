"""A planted /proc and /sys/fs/cgroup for helpers.environment's `cpu_cgroup` and `autogroup` (tests of the helper
and of lesson 07's table cell)."""

from helpers import environment


def plant_proc(tmp_path, monkeypatch, cgroup: str, enabled="1", namespace="cgroup:[4026531835]", controllers=None):
    """A /proc (and /sys/fs/cgroup, cgroup v2 mounted there) as Linux shows them: /proc/self/cgroup's lines,
    sched_autogroup_enabled, the cgroup namespace, and each v2 cgroup's cgroup.controllers ({path: "cpu io"})."""
    proc, root = tmp_path / "proc", tmp_path / "root"
    (proc / "self/ns").mkdir(parents=True)
    (proc / "sys/kernel").mkdir(parents=True)
    (proc / "self/cgroup").write_text(cgroup)
    (proc / "self/ns/cgroup").symlink_to(namespace)
    (proc / "self/mountinfo").write_text("31 23 0:28 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n")
    (proc / "sys/kernel/sched_autogroup_enabled").write_text(enabled + "\n")
    for path, listed in (controllers or {}).items():
        (root / "sys/fs/cgroup" / path.strip("/")).mkdir(parents=True, exist_ok=True)
        (root / "sys/fs/cgroup" / path.strip("/") / "cgroup.controllers").write_text(listed + "\n")
    monkeypatch.setattr(environment, "PROC", str(proc))
    monkeypatch.setattr(environment, "SYS_ROOT", str(root))


V1 = "9:name=systemd:/\n4:memory:/x\n{cpu}\n0::/\n"
