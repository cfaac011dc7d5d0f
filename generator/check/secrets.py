"""Lint rules over secrets: a token, a password or a key written in a recipe would land in the committed out/;
what looks like one (by its name or its value) is refused. The importers and the cluster check use the same
patterns."""

from __future__ import annotations

import re

from generator.check.registry import ERROR, Findings, rule
from generator.resolve.model import Cluster, Recipe


# Formats of real tokens: Hugging Face, OpenAI-style, GitHub, GitLab, Slack, AWS access keys, JWTs; a URL carrying
# a password (https://user:pw@host, also git+ssh://, redis://), an HTTP Authorization value (Bearer / Basic).
# A URL's scheme starts where no scheme character precedes it: without the lookbehind a long run of letters (a
# 1 MiB mod file or argument) is rescanned from every position, quadratic time.
SECRET_VALUE = re.compile(r"(hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
                          r"|glpat-[A-Za-z0-9_-]{20,}|xox[baprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}"
                          r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\."
                          r"|(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"
                          r"|\b(?:[Bb]earer|BEARER|[Bb]asic|BASIC)\s+[A-Za-z0-9._~+/-]{8,}=*)")


# Whole words of a variable name: HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, SSH_PASSPHRASE; a name ending
# in TOKEN (HFTOKEN) or _KEY (WANDB_KEY, OPENAI_KEY); not TOKENIZERS_PARALLELISM, MAX_NUM_BATCHED_TOKENS or
# NCCL_IB_GID_INDEX.
SECRET_NAME = re.compile(r"(^|[_-])(TOKEN|SECRET|PASSWORD|PASSWD|PASS|PASSPHRASE|API[_-]?KEY|ACCESS[_-]KEY"
                         r"|PRIVATE[_-]KEY|CREDENTIALS?)($|[_-])|TOKEN$|[_-]KEY$", re.I)


# Docker's *_FILE convention and friends name where a secret lives, not the secret; a public key, and the keys
# of caches, sorts and maps, are not secrets; nor a token map (SGLang's --speculative-token-map, a file) or a
# forward pass (--forward-pass-metrics-*).
NOT_A_SECRET_NAME = re.compile(r"[_-](FILE|PATH|DIR|MOUNT)$|(^|[_-])TOKEN[_-]MAP$|(^|[_-])FORWARD[_-]PASS([_-]|$)|(^|[_-])(PUBLIC|CACHE|SORT|HASH|PARTITION|SHARD|ROUTING"
                               r"|PRIMARY|LOOKUP|INDEX|MAP|GROUP)[_-]KEY$", re.I)


def secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) and not NOT_A_SECRET_NAME.search(name)


def secret_flag(engine: str, flag: str) -> bool:
    """An engine flag named like a secret whose value can be one: not a flag the engine's own flag data parses as a
    number or a switch (`--long-prefill-token-threshold 4096`, `--speculative-num-draft-tokens`)."""
    if not secret_name(flag.lstrip("-")):
        return False
    from generator.engines.flags import numeric  # the flag data loads only when a flag is named like a secret

    spelled = "--" + flag.lstrip("-").replace("_", "-")  # vLLM takes --long_prefill_token_threshold too
    return not (numeric(engine, flag) or numeric(engine, spelled))


def secret_env(name: str, value: str) -> bool:
    """A variable (or build arg) that is a secret: named like one, or holding what looks like a token."""
    return secret_name(name) or bool(SECRET_VALUE.search(value))


SECRET_FIX = ("secrets must not be written in recipes or clusters (they would land in committed out/): export it in "
              "the shell that deploys and list its name in `pass_env`, so Compose passes it through at `up`")


@rule("secret", ERROR, "a value that looks like a secret in a recipe")
def _secret(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for name, value in recipe.env.items():
        if value and secret_env(name, value):
            yield recipe.env_origins[name], f"env.{name}", f"looks like a secret: {SECRET_FIX}"
    for name, value in recipe.build_args.items():  # written into the compose files' `build.args`
        if value and secret_env(name, value):
            yield (recipe.build_arg_origins.get(name) or recipe.origins["build_args"], f"build_args.{name}",
                   f"looks like a secret: {SECRET_FIX} (a build secret belongs in a BuildKit secret mount)")
    for group in recipe.flag_groups:  # a token-looking word anywhere, or the value of --api-key and the like
        named = group.flag is not None and secret_flag(recipe.engine, group.flag) and group.values
        if named or any(SECRET_VALUE.search(arg.word) for arg in group.args):
            yield group.args[0].origin, "args", f"{group.flag or 'a word'} looks like a secret: {SECRET_FIX}"
    # `ray start --redis-password x`: the value of a secret-named flag, or a token-looking word
    for i, arg in enumerate(recipe.ray_args):
        flag, eq, inline = arg.word.partition("=")
        has_value = bool(inline) if eq else (i + 1 < len(recipe.ray_args)
                                               and not recipe.ray_args[i + 1].word.startswith("-"))
        named_secret = flag.startswith("-") and secret_name(flag.lstrip("-")) and has_value
        if named_secret or SECRET_VALUE.search(arg.word):
            yield arg.origin, "ray_args", f"{flag if named_secret else 'a word'} looks like a secret: {SECRET_FIX}"
    for i, step in enumerate(recipe.setup):  # the launcher script is in the compose file, word for word
        if SECRET_VALUE.search(step.word):
            yield step.origin, f"setup[{i}]", f"looks like a secret: {SECRET_FIX}"
    for key in ("entrypoint", "model", "docker_image", "name", "dockerfile", "docker_image_dir"):
        words = getattr(recipe, key)
        if words and any(SECRET_VALUE.search(word) for word in ([words] if isinstance(words, str) else words)):
            yield recipe.origins[key], key, f"looks like a secret: {SECRET_FIX}"
    for key, setting in recipe.container.items():
        if isinstance(setting, str) and SECRET_VALUE.search(setting):
            yield recipe.origins[key], key, f"looks like a secret: {SECRET_FIX}"
    for mount in recipe.mounts:
        if SECRET_VALUE.search(mount.host) or SECRET_VALUE.search(mount.container):
            yield mount.origin, "extra_mounts", f"looks like a secret: {SECRET_FIX}"
    # inline, a mod's files travel inside every compose file; in their image (mods_transport) they are in no
    # generated file
    for mod in () if recipe.mods_in_image else recipe.mods:
        for file in mod.files:
            found = SECRET_VALUE.search(file.text)
            if found:
                line = file.text.count("\n", 0, found.start()) + 1
                yield (mod.origin, "mods", f"mod '{mod.source}': {file.path} line {line} looks like a secret: "
                                           f"{SECRET_FIX}")
