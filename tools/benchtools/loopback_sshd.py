"""A second "machine" on this one: a real OpenSSH server on a loopback port.

It has its own generated host key (pinned in the Airflow connection it describes), accepts one
generated client key and no passwords, and keeps runs in its own workdir: a GPU host to try campaigns over real
SSH on one machine. Used by the tests and by the benchmarks under bench/.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import psutil

from benchtools.net import free_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


class LoopbackSSHD:
    def __init__(self, root: Path, port: int | None = None, env: dict[str, str] | None = None):
        self.env = dict(env or {})  # set in every session (sshd's SetEnv): a host's PATH, say
        self.root = Path(root)
        self.port = port or free_port()
        self.workdir = self.root / "remote-workdir"
        self.host_key = self.root / "ssh_host_ed25519_key"
        self.client_key = self.root / "client_ed25519_key"
        self.config = self.root / "sshd_config"
        self.log = self.root / "sshd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._setup()

    def _setup(self) -> None:
        if not Path(SSHD).exists():
            raise RuntimeError(f"{SSHD} not found: `make test` installs openssh-server (apt-get)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(exist_ok=True)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
        for key in (self.host_key, self.client_key):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        (self.root / "authorized_keys").write_text(self.client_key.with_suffix(".pub").read_text())
        self.config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\nPidFile {self.root}/sshd.pid\n"
            f"AuthorizedKeysFile {self.root}/authorized_keys\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"
            "UsePAM no\nStrictModes no\nLogLevel VERBOSE\nMaxStartups 200\nMaxSessions 200\n"
            "Subsystem sftp internal-sftp\n" + self._set_env()
        )

    def _set_env(self) -> str:
        """One ``SetEnv`` line for every variable: sshd keeps the first value of a keyword it reads twice."""
        return ("SetEnv " + " ".join(f'{k}="{v}"' for k, v in self.env.items()) + "\n") if self.env else ""

    @property
    def public_host_key(self) -> str:
        """``ssh-ed25519 AAAA…``: what a connection pins."""
        return " ".join(self.host_key.with_suffix(".pub").read_text().split()[:2])

    def start(self) -> LoopbackSSHD:
        log = self.log.open("ab")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def stop(self) -> None:
        """Stop the server and every session it holds open (as a reboot or a network cut would)."""
        if self.proc is None:
            return
        try:
            sessions = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            sessions = []
        self.proc.terminate()
        for session in sessions:
            try:
                if session.name().startswith("sshd"):
                    session.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(10)
        self.proc = None

    def connections_accepted(self) -> int:
        """Logins since the log began: sshd logs one 'Accepted publickey' per SSH connection."""
        return self.log.read_text(errors="replace").count("Accepted publickey") if self.log.exists() else 0

    def connection(self, python: str | None = None, host_key: str | None = None) -> dict[str, object]:
        """An Airflow connection to this server (JSON form of AIRFLOW_CONN_<ID>); its python is the host
        environment's (.venv-host, with the serving stack), as on a GPU host."""
        from benchflow.paths import host_python

        python = python or host_python()
        return {
            "conn_type": "ssh",
            "host": "127.0.0.1",
            "port": self.port,
            "login": "root",
            "extra": {
                "key_file": str(self.client_key),
                "host_key": host_key or self.public_host_key,
                "workdir": str(self.workdir),
                "python": python,
            },
        }

    def connection_env(self, conn_id: str, **kwargs: object) -> tuple[str, str]:
        return f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(self.connection(**kwargs))  # type: ignore[arg-type]
