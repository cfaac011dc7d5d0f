"""The key a recipe's group watches prove to each other that they hold (runtime/groupwatch.py), so that nobody but
the recipe's own ranks can restart or stop its group through the group port.

It never lands in a generated file: every compose file names RECIPEGEN_GROUP_KEY with no value (taken from the
environment that deploys), and `up` gives it. It is derived per recipe from one secret of the deploying user, so a
second `up` gives the same key and Compose leaves the running containers alone:

- RECIPEGEN_GROUP_KEY set in the deploying shell: taken as it is (a team that deploys from several machines);
- else RECIPEGEN_GROUP_SECRET, or the file `$XDG_CONFIG_HOME/recipegen/group-secret` (0600, made at the first `up`),
  HMAC'd with the recipe's id.

Where neither can be had (no home to write), there is no key, and the watches check only that a connection comes
from a rank's fabric address (docs/self-healing.md, "Who may talk to the group").
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from generator.plan.types import GROUP_KEY_ENV

SECRET_ENV = "RECIPEGEN_GROUP_SECRET"


def secret_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "recipegen" / "group-secret"


def _user_secret() -> str | None:
    given = os.environ.get(SECRET_ENV)
    if given:
        return given
    path = secret_file()
    try:
        return path.read_text("ascii").strip() or None
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        return None
    try:  # made whole (written aside, then linked in: never seen empty), its owner's only; a racing `up` wins once
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        finally:
            aside.unlink()
        return path.read_text("ascii").strip() or None
    except OSError:
        return None


def group_key_env(project: str) -> dict[str, str]:
    """The environment `compose up` / `stack deploy` get for a recipe's ranks: its group key, or nothing."""
    given = os.environ.get(GROUP_KEY_ENV)
    if given:
        return {GROUP_KEY_ENV: given}
    secret = _user_secret()
    if secret is None:
        return {}
    key = hmac.new(secret.encode(), b"recipegen-group\0" + project.encode(), hashlib.sha256).hexdigest()
    return {GROUP_KEY_ENV: key}
