"""Which flags an engine release accepts, from generator/data/engine_flags.json (tools/extract_engine_flags.py
writes it from the engines' published wheels), and which release a recipe's image most likely runs.

Loaded on first use only: `validate` pays for it, `--help` and a clean `build --check` start-up do not import it.
"""

from __future__ import annotations

import bisect
import difflib
import json
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

# NVIDIA's NGC vLLM containers (nvcr.io/nvidia/vllm:YY.MM-py3) and the vLLM each ships, from NVIDIA's
# "vLLM Release YY.MM" notes (docs.nvidia.com/deeplearning/frameworks/vllm-release-notes/rel-YY-MM.html).
NGC_VLLM = {"25.10": "0.10.2", "26.01": "0.11.1", "26.03": "0.17.1", "26.05": "0.20.1", "26.10": "0.31.0"}
_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.\d+)?(?:\.?post\d+)?)(?:$|[-_+])")
_NGC_TAG = re.compile(r"^(\d\d\.\d\d)(?:$|-)")
_UPSTREAM_REPOS = {"vllm": ("vllm/vllm-openai", "vllm-project/vllm-openai"), "sglang": ("lmsysorg/sglang",)}


@dataclass(frozen=True)
class FlagSpec:
    """How one spelling of a flag parses in one release."""

    name: str
    type: str  # bool | int | float | str | json | json_or_str (JSON when it is {...}) | choice | any
    choices: tuple[str, ...] = ()
    nargs: str | int | None = None
    optional: bool = False  # "None" parses
    of: str | None = None  # the canonical spelling, for an alias (-tp, --no-x)

    @property
    def canonical(self) -> str:
        return self.of or self.name


@dataclass(frozen=True)
class Release:
    """The engine release a recipe is checked against, and how sure that is."""

    engine: str
    version: str  # a release with flag data
    exact: bool  # the image names this very release
    why: str  # said in messages: "image tag v0.11.0", "custom image ...: assumed the newest ..."

    def __str__(self) -> str:
        return f"{self.engine} {self.version}"


@dataclass(frozen=True)
class Lookup:
    """What the engine makes of a flag word: `spec` when it is a flag of the release, else why not."""

    spec: FlagSpec | None
    message: str | None = None
    abbreviation: bool = False
    unknown: tuple[Release, str] | None = None  # (release, name) of a flag it lacks: the message is made on demand

    @property
    def problem(self) -> str | None:
        """A sentence for the unknown-flag warning. Made only when asked: the did-you-mean is the costly part."""
        if self.unknown is None:
            return self.message
        release, name = self.unknown
        return _elsewhere(release, name) or _did_you_mean(release.engine, release.version, name)


@cache
def _data() -> dict[str, Any]:
    text = resources.files("generator").joinpath("data/engine_flags.json").read_text("utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def releases(engine: str) -> list[str]:
    """The releases with flag data, oldest first."""
    return list(_data()["engines"].get(engine, {}).get("releases", []))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def ngc_vllm(tag: str) -> tuple[str, bool, str] | None:
    """(vLLM version, exact, how it was found) an NGC vLLM container tag ships; None for a tag that is no month.
    A month with no note gets the latest known month not after it (else the first known)."""
    ngc = _NGC_TAG.match(tag)
    if not ngc:
        return None
    month = ngc.group(1)
    if month in NGC_VLLM:
        return NGC_VLLM[month], True, f"NGC {month} ships vLLM {NGC_VLLM[month]}"
    months = sorted(m for m in NGC_VLLM if m <= month) or sorted(NGC_VLLM)
    return NGC_VLLM[months[-1]], False, f"NGC {month}: assumed vLLM {NGC_VLLM[months[-1]]} of NGC {months[-1]}"


def release_for_image(engine: str, image: str) -> Release | None:
    """The release `image` most likely runs; None when there is no flag data for the engine."""
    known = releases(engine)
    if not known:
        return None
    newest = known[-1]
    ref = image.split("@", 1)[0]
    repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    version = None
    source = ""
    exact = True
    if engine == "vllm" and repo.endswith("nvidia/vllm"):
        shipped = ngc_vllm(tag)
        if shipped:
            version, exact, source = shipped
    elif any(repo == r or repo.endswith("/" + r) for r in _UPSTREAM_REPOS.get(engine, ())):
        match = _VERSION.match(tag)
        if match:
            version, source = match.group(1).replace("post", ".post").replace("..", "."), f"image tag {tag}"
    if version is None:
        return Release(engine, newest, False, f"{image} names no {engine} release: the newest with flag data "
                                              "assumed")
    if version in known:
        return Release(engine, version, exact, source)
    nearest = min(known, key=lambda v: (_distance(v, version), v))
    return Release(engine, nearest, False, f"{source}; no flag data for {version}, checked against the nearest "
                                           f"release with data, {nearest}")


def _distance(a: str, b: str) -> tuple[int, ...]:
    ka, kb = _version_key(a), _version_key(b)
    width = max(len(ka), len(kb))
    ka, kb = ka + (0,) * (width - len(ka)), kb + (0,) * (width - len(kb))
    return tuple(abs(x - y) for x, y in zip(ka, kb))


@cache
def _release_table(engine: str, version: str) -> tuple[dict[str, FlagSpec], dict[str, Any]]:
    """Every spelling of `version` and its parser traits (underscores, dotted JSON keys, abbreviations)."""
    data = _data()["engines"][engine]
    index = data["releases"].index(version)
    table = {}
    for name, variants in data["flags"].items():
        for v in variants:
            if index in v["in"]:
                table[name] = FlagSpec(name, v["type"], tuple(v.get("choices", ())), v.get("nargs"),
                                       bool(v.get("optional")), v.get("of"))
                break
    return table, data["parser"][index]


def known_in_some_release(engine: str, word: str) -> bool:
    """Some release with data accepts `word` as written (its own spelling rules, no abbreviation)."""
    for version in releases(engine):
        found = lookup(Release(engine, version, True, ""), word)
        if found.spec is not None and not found.abbreviation:
            return True
    return False


@cache
def numeric(engine: str, flag: str) -> bool:
    """Every release with data parses `flag` (or the flag it is an alias of) as a number or a switch: its value is
    a count, a size or a threshold, never a secret (`--long-prefill-token-threshold`)."""
    variants = _data()["engines"][engine]["flags"].get(flag) if engine in _data()["engines"] else None
    if not variants:
        return False
    types = {v["type"] for v in variants}
    aliased = {v["of"] for v in variants if v.get("of")}
    return types <= {"int", "float", "bool"} or (bool(aliased) and all(numeric(engine, a) for a in aliased))


def releases_with(engine: str, flag: str) -> list[str]:
    data = _data()["engines"][engine]
    indices = sorted({i for v in data["flags"].get(flag, []) for i in v["in"]})
    return [data["releases"][i] for i in indices]


@lru_cache(maxsize=4096)  # recipes repeat the same flags, and `known_in_some_release` asks every release
def lookup(release: Release, word: str) -> Lookup:
    """What `release`'s parser makes of the flag word `word` (its name part: `--max-num-seqs`, `-O3`)."""
    table, parser = _release_table(release.engine, release.version)
    name = word.split("=", 1)[0]
    if name in table:
        return Lookup(table[name])
    if name.startswith("--"):
        if parser["underscores"]:
            name = name.replace("_", "-") if "." not in name else name.split(".", 1)[0].replace("_", "-") + \
                "." + name.split(".", 1)[1]
            if name in table:
                return Lookup(table[name])
        if parser["dotted_json"] and "." in name:
            base = name.split(".", 1)[0]
            if base in table and table[base].type == "json":
                return Lookup(table[base])
            name = base
    elif name == "-O" and parser.get("short_o"):  # vLLM rewrites `-O 3` to --optimization-level 3
        return Lookup(table.get("--optimization-level") or FlagSpec("-O", "any"))
    elif len(name) > 2:  # -O3, -Odecode: a one-letter option with its value attached
        if name[:2] in table and table[name[:2]].type != "bool":
            return Lookup(table[name[:2]])
        if parser.get("short_o") and name.startswith("-O"):
            return Lookup(table.get("--optimization-level") or FlagSpec("-O", "any"))
    dashed = name.replace("_", "-")
    if dashed != name and dashed in table and not parser["underscores"]:
        return Lookup(None, f"{release.engine} does not accept '_' for '-' in flag names; did you mean "
                            f"'{dashed}'?")
    if parser["abbrev"] and name.startswith("--"):
        longer = _starting_with(release.engine, release.version, name)
        if len(longer) == 1:
            return Lookup(table[longer[0]], f"did you mean '{longer[0]}'? (argparse takes the prefix as an "
                                            "abbreviation of it today; a release with another flag of that prefix "
                                            "refuses it)", abbreviation=True)
        if len(longer) > 1:
            shown = ", ".join(f"'{n}'" for n in longer[:4]) + (" ..." if len(longer) > 4 else "")
            return Lookup(None, f"the engine refuses it as an ambiguous abbreviation of {shown}")
    return Lookup(None, unknown=(release, name))


def _starting_with(engine: str, version: str, prefix: str) -> list[str]:
    """The release's flag names that start with `prefix`, sorted: a range of the sorted names (bisect), not a
    scan of every name for every unknown flag."""
    names = _sorted_names(engine, version)
    start = bisect.bisect_left(names, prefix)
    end = start
    while end < len(names) and names[end].startswith(prefix):
        end += 1
    return list(names[start:end])


@cache
def _sorted_names(engine: str, version: str) -> tuple[str, ...]:
    return tuple(sorted(_release_table(engine, version)[0]))


@cache
def _did_you_mean(engine: str, version: str, name: str) -> str:
    close = difflib.get_close_matches(name, list(_release_table(engine, version)[0]), n=1, cutoff=0.75)
    return f"did you mean '{close[0]}'?" if close else "see the engine's --help"


def _elsewhere(release: Release, name: str) -> str | None:
    """'added after 0.11.0, in 0.31.0 and later' / 'removed after 0.10.2, gone by 0.11.0' when other releases
    with data have the flag (the data has gaps between releases: both ends are said)."""
    having = releases_with(release.engine, name)
    if not having:
        return None
    known = releases(release.engine)
    key = _version_key(release.version)
    newer = [v for v in having if _version_key(v) > key]
    older = [v for v in having if _version_key(v) < key]
    if newer and not older:
        before = known[known.index(newer[0]) - 1]
        return f"added after {before}, it is in {newer[0]} and later" if _version_key(before) >= key else \
            f"it is in {newer[0]} and later"
    if older and not newer:
        gone = known[known.index(older[-1]) + 1]
        return f"removed after {older[-1]}" + (f", gone by {gone}" if gone != release.version else "")
    return f"releases with it: {', '.join(having)}"


def same_type_everywhere(release: Release, spec: FlagSpec) -> bool:
    """Every release with data parses this flag the same way (for an image whose release is a guess)."""
    variants = _data()["engines"][release.engine]["flags"].get(spec.name, [])
    return len({(v["type"], v.get("nargs")) for v in variants}) == 1


def value_problem(spec: FlagSpec, values: list[str], sure_of_choices: bool) -> str | None:
    """Why the engine would refuse `values` for `spec`, or None. Only what the data is sure of."""
    if spec.type == "bool":
        return f"is a switch and takes no value, the engine refuses '{values[0]}'" if values else None
    if not values:
        return None
    checked = values if spec.nargs in ("+", "*") else values[:1]
    for value in checked:
        if spec.optional and value in ("None", ""):
            continue
        if spec.type == "int" and not _parses(int, value):
            return f"takes an integer, not '{value}'"
        if spec.type == "float" and not _parses(float, value):
            return f"takes a number, not '{value}'"
        if spec.type == "choice" and sure_of_choices and spec.choices and not _chosen(value, spec.choices):
            close = difflib.get_close_matches(value, spec.choices, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            shown = ", ".join(spec.choices[:12]) + (" ..." if len(spec.choices) > 12 else "")
            return f"'{value}' is not one of {shown}{hint}"
    return None


def _chosen(value: str, choices: tuple[str, ...]) -> bool:
    """argparse compares after `type=`: '08' is the choice 8 of an int flag."""
    if value in choices:
        return True
    try:
        return float(value) in {float(c) for c in choices}
    except ValueError:
        return False


def _parses(kind: type, value: str) -> bool:
    try:
        kind(value)
        return True
    except ValueError:
        return False
