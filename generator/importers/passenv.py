"""Secrets never land in a generated recipe: an env variable the `secret` lint rule would refuse (named like one,
HF_TOKEN, *_API_KEY, or holding a token's format) leaves [env] for `pass_env`, its value unwritten and the fact
named; a token anywhere else the import would write (the command, pre_exec) refuses the file."""

from __future__ import annotations

from generator.check.secrets import SECRET_VALUE, secret_env
from generator.importers.base import EnvVar, Field, NotCarried, TomlValue, peer_key
from generator.importers.yamlfile import YamlFile


def split_secrets(doc: YamlFile, env: list[EnvVar]) -> tuple[list[EnvVar], list[Field], list[NotCarried]]:
    secrets = [e for e in env if secret_env(e.name, e.value)]
    if not secrets:
        return env, [], []
    names = [e.name for e in secrets]
    field = Field("pass_env", names, f"{doc.name}: env secrets, passed by name from the shell that deploys")
    named = [NotCarried(f"env.{e.name}", doc.line("env", e.name), "a secret: its value is not written; it is "
                                                                   "in pass_env (export it where `recipegen up` runs)")
             for e in secrets]
    return [e for e in env if e.name not in names], [field], named


def refuse_tokens(doc: YamlFile, fields: tuple[Field, ...]) -> None:
    """One line naming the peer key whose value would write a token into the recipe (the token itself unshown:
    the terminal and CI logs are no place for it either)."""
    for field in fields:
        if _holds_token(field.value):
            raise doc.error(peer_key(doc, field.key, field.source),
                            f"holds what looks like a secret, which the recipe's `{field.key}` would carry into out/: "
                            "remove it from the file and give it to the engine from the environment (`pass_env`)")


def _holds_token(value: TomlValue) -> bool:
    if isinstance(value, str):
        return bool(SECRET_VALUE.search(value))
    if isinstance(value, list):
        return any(_holds_token(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_token(v) for v in value.values())
    return False
