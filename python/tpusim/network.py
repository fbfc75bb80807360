"""TPU names the way the plugin and ``tpusim resolve`` read them: ``$TPUSIM_HOME/registry.db`` (default
``~/.tpusim``), the SQLite registry that ``tpusim serve --name NAME`` keeps up to date.

    from tpusim.network import resolve, list_tpus
    os.environ["TPU_GRPC_URL"] = resolve("my-tpu")      # "grpc://127.0.0.1:8470"

A name resolves when its server answers. The C side (plugin, CLI) asks the server's gRPC health service;
this helper, without a gRPC library, takes a fresh heartbeat (the server writes one every 2 s) and a
connection accepted at the address as the same evidence, and otherwise raises TpuUnavailable naming the
address and the age of the last heartbeat.
"""
from __future__ import annotations

import os
import socket
import sqlite3
import time
from urllib.parse import urlsplit

HEARTBEAT_S = 2.0          # tpusim serve's heartbeat (src/net/net.h TN_HEARTBEAT_S)
STALE_AFTER_S = 5 * HEARTBEAT_S


class TpuNotFound(LookupError):
    pass


class TpuUnavailable(ConnectionError):
    pass


def home() -> str:
    return os.environ.get("TPUSIM_HOME") or os.path.join(os.path.expanduser("~"), ".tpusim")


def _db():
    path = os.path.join(home(), "registry.db")
    if not os.path.exists(path):
        raise TpuNotFound(f"no registry at {path} (tpusim serve --name NAME makes one)")
    con = sqlite3.connect(path, timeout=10)
    con.row_factory = sqlite3.Row
    return con


def list_tpus() -> list[dict]:
    """Every registered TPU: name, url, slice, state, clients, hbm_in_use, hbm_total, pid, host, heartbeat."""
    with _db() as con:
        return [dict(r) for r in con.execute("SELECT * FROM tpus ORDER BY name")]


def _answers(url: str, timeout: float = 2.0) -> bool:
    u = urlsplit(url if "://" in url else "grpc://" + url)
    try:
        with socket.create_connection((u.hostname, u.port or 8470), timeout=timeout):
            return True
    except OSError:
        return False


def healthy(entry: dict) -> bool:
    return time.time() - float(entry.get("heartbeat") or 0) < STALE_AFTER_S and _answers(entry["url"])


def resolve(name: str) -> str:
    """TPU_NAME -> TPU_GRPC_URL, or TpuNotFound / TpuUnavailable."""
    with _db() as con:
        row = con.execute("SELECT * FROM tpus WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise TpuNotFound(f"no TPU named {name!r} in {home()}/registry.db (tpusim list shows the names)")
    entry = dict(row)
    if not healthy(entry):
        age = time.time() - float(entry.get("heartbeat") or 0)
        raise TpuUnavailable(f"TPU {name!r} is registered at {entry['url']} but does not answer "
                             f"(last heartbeat {age:.0f} s ago; UNHEALTHY: its server is gone or stuck)")
    return entry["url"]
