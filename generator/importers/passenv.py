"""Secrets never land in a generated recipe: an env variable named like one (HF_TOKEN, *_API_KEY: the `secret`
lint rule's names) leaves [env] for `pass_env`, its value unwritten and the fact named."""

from __future__ import annotations

from generator.importers.base import EnvVar, Field, NotCarried
from generator.importers.yamlfile import YamlFile
from generator.lint import secret_name


def split_secrets(doc: YamlFile, env: list[EnvVar]) -> tuple[list[EnvVar], list[Field], list[NotCarried]]:
    secrets = [e for e in env if secret_name(e.name)]
    if not secrets:
        return env, [], []
    names = [e.name for e in secrets]
    field = Field("pass_env", names, f"{doc.name}: env secrets, passed by name from the shell that deploys")
    named = [NotCarried(f"env.{e.name}", doc.line("env", e.name), "a secret: its value is not written; it is "
                                                                   "in pass_env (export it where `recipegen up` runs)")
             for e in secrets]
    return [e for e in env if e.name not in names], [field], named
