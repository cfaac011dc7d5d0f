"""The broken-input corpus (issue 2): every bad recipe or cluster file gets one clear line per problem naming
file, line and key, all problems of a file at once, exit code 1, and never a Python traceback.

Corpus layout (kompose / Helm style: one fixture file per case)
---------------------------------------------------------------
    tests/corpus/recipes/<case>.toml              a broken recipe
    tests/corpus/clusters/<case>.toml             a broken cluster file
    tests/corpus/multi/<case>/<id>/recipe.toml    recipes that need each other (`extends`)

Expectations are comment lines in the fixture itself, one per diagnostic `recipegen validate FILE` must print:

    # expect: LINE KEY [TEXT]
    # expect: LINE:COL KEY [TEXT]      (the column too: where the key or value starts)
    # expect: FILE:LINE KEY [TEXT]     (multi/ only: FILE is relative to tests/corpus/multi/<case>/)

meaning: stderr holds a line `<FILE>:<LINE>:<col>: error...` whose message (after the severity) contains KEY
and, when given, TEXT (everything after KEY, verbatim). The line numbers are counted by hand from the fixture.
More diagnostics than expected are allowed (a missing key may also be reported as missing), fewer are not.

How the tool knows the kind: it decides by the file name (`recipe.toml`) or by a first line
`#:schema ...recipe.schema.json` / `#:schema ...cluster.schema.json`. So:
  * every fixture's line 1 is such a directive, with the relative path that really reaches schema/ (editors,
    `taplo check` and `tombi lint` check the corpus with the same schemas), and the file is validated in place;
  * a fixture without a directive on line 1 (a syntax error that must sit on line 1) is copied by the test to
    <tmp>/<case>/recipe.toml, or <tmp>/<case>/cluster.toml for clusters/ -- the name then tells the kind.
Inputs that cannot carry comments (empty and whitespace-only files, a directory, a missing or unreadable path)
are built below, in tmp_path.

A case where the tool is wrong keeps its honest expectation and is listed in KNOWN_BUGS (xfail, strict): when the
tool is fixed the test XPASSes, fails, and the entry must go.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main
from helpers.corpus import DIAG, Expect, ROOT, Run, _mentions, assert_clean_failure, assert_expected, run_inprocess, shown  # noqa: F401 - moved to tests/helpers/

CORPUS = ROOT / "tests" / "corpus"
SCHEMA_DIR = ROOT / "schema"
RECIPE_DIRECTIVE = re.compile(r"^#:schema\s+\S*recipe\.schema\.json\s*$")
CLUSTER_DIRECTIVE = re.compile(r"^#:schema\s+\S*cluster\.schema\.json\s*$")
EXPECT = re.compile(r"^#\s*expect:\s*(?:(?P<file>(?!\d+[:\s])[^\s:]+):)?(?P<line>\d+)(?::(?P<col>\d+))?\s+(?P<key>\S+)"
                    r"(?:\s+(?P<text>.*?))?\s*$")

# case id -> why the tool's output is wrong today (each one reproduced in the report to the lead).
KNOWN_BUGS: dict[str, str] = {
}


# --- the corpus ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str  # recipes/<case>, clusters/<case> or multi/<case>/<id>
    path: Path
    kind: str  # recipe | cluster
    expects: tuple[Expect, ...]

    @property
    def has_directive(self) -> bool:
        first = self.path.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
        return bool((RECIPE_DIRECTIVE if self.kind == "recipe" else CLUSTER_DIRECTIVE).match(first))


def _parse_case(path: Path) -> Case:
    rel = path.relative_to(CORPUS)
    group = rel.parts[0]
    kind = "cluster" if group == "clusters" else "recipe"
    case_id = str(rel.with_suffix("")) if group != "multi" else str(rel.parent)
    base = path.parent.parent if group == "multi" else path.parent
    expects = []
    for raw in path.read_bytes().decode("utf-8", "replace").splitlines():
        if not raw.startswith("#"):
            continue
        m = EXPECT.match(raw)
        if m:
            target = (base / m["file"]) if m["file"] else path
            expects.append(Expect(target, int(m["line"]), m["key"], m["text"] or None,
                                  int(m["col"]) if m["col"] else None))
    return Case(case_id, path, kind, tuple(expects))


def _corpus() -> list[Case]:
    files = sorted((CORPUS / "recipes").glob("*.toml")) + sorted((CORPUS / "clusters").glob("*.toml"))
    files += sorted((CORPUS / "multi").glob("*/*/recipe.toml"))
    return [_parse_case(p) for p in files]


CASES = _corpus()


def _params(cases: list[Case]) -> list:
    return [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[c.id])]
                         if c.id in KNOWN_BUGS else []) for c in cases]


# --- running the tool ------------------------------------------------------------------------------------


def run_subprocess(*args: str) -> Run:
    """The package under test (not whatever `recipegen` is first on PATH), in a process of its own."""
    cmd = [sys.executable, "-m", "generator", *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(autouse=True)
def _in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # paths in messages are relative to the working directory


def target_for(case: Case, tmp_path: Path) -> Path:
    """The path to validate: the fixture itself, or a copy named recipe.toml / cluster.toml (no directive)."""
    if case.has_directive:
        return case.path.relative_to(ROOT)
    dest = tmp_path / case.path.stem / ("cluster.toml" if case.kind == "cluster" else "recipe.toml")
    dest.parent.mkdir(parents=True)
    shutil.copyfile(case.path, dest)
    return dest


def retarget(case: Case, target: Path) -> list[Expect]:
    return [Expect(target if e.file == case.path else e.file, e.line, e.key, e.text, e.col) for e in case.expects]


# --- the corpus itself is well-formed ----------------------------------------------------------------------

def test_corpus_size_and_shape() -> None:
    assert len(CASES) >= 30, f"only {len(CASES)} corpus files"
    groups = {c.id.split("/")[0] for c in CASES}
    assert groups == {"recipes", "clusters", "multi"}
    for case in CASES:
        assert case.expects, f"{case.id}: no `# expect:` line"
        lines = case.path.read_bytes().split(b"\n")
        for e in case.expects:
            assert e.file.is_file(), f"{case.id}: expectation names a missing file {e.file}"
            n = len(e.file.read_bytes().split(b"\n"))
            assert 1 <= e.line <= n, f"{case.id}: line {e.line} is outside {e.file.name} ({n} lines)"
        if not case.has_directive:  # copied to recipe.toml / cluster.toml; only single-file cases may do that
            assert case.id.split("/")[0] in ("recipes", "clusters"), case.id
            assert not lines[0].startswith(b"#:schema"), f"{case.id}: a #:schema line of the wrong kind"
    assert set(KNOWN_BUGS) <= {c.id for c in CASES} | set(_TESTCODE_BUGS), "KNOWN_BUGS names no case"


# --- the corpus, in process and as a subprocess --------------------------------------------------------------

@pytest.mark.parametrize("case", _params(CASES))
def test_corpus_case(case: Case, tmp_path: Path) -> None:
    target = target_for(case, tmp_path)
    run = run_inprocess("validate", str(target))
    assert_expected(run, retarget(case, target), f"recipegen validate {target}")


SUBPROCESS_CASES = ["recipes/misspelt-top-level-keys", "recipes/syntax-duplicate-key", "recipes/not-utf8",
                    "clusters/duplicate-node-name", "clusters/syntax-line-1", "multi/cycle/a"]


@pytest.mark.parametrize("case", _params([c for c in CASES if c.id in SUBPROCESS_CASES]))
def test_corpus_case_subprocess(case: Case, tmp_path: Path) -> None:
    target = target_for(case, tmp_path)
    run = run_subprocess("validate", str(target))
    assert_expected(run, retarget(case, target), f"recipegen validate {target}")


def test_subprocess_cases_exist() -> None:
    assert set(SUBPROCESS_CASES) <= {c.id for c in CASES}


def test_all_files_at_once() -> None:
    """Several broken files on one command line: every file's errors, one run."""
    picked = [c for c in CASES if c.id in ("recipes/type-integer-for-string", "clusters/range-ports",
                                           "recipes/misspelt-top-level-keys")]
    assert len(picked) == 3
    run = run_inprocess("validate", *(str(c.path.relative_to(ROOT)) for c in picked))
    assert_expected(run, [e for c in picked for e in c.expects], "recipegen validate <3 files>")


# --- inputs built by the test: empty, whitespace, directories, missing and unreadable paths -----------------

# test id -> reason, for the cases below (xfail, strict)
_TESTCODE_BUGS: dict[str, str] = {
}


def _xfail_if_known(request: pytest.FixtureRequest) -> None:
    reason = _TESTCODE_BUGS.get(request.node.name)
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


REQUIRED = {"recipe": ("engine", "docker_image", "model"), "cluster": ("name", "nodes")}


@pytest.mark.parametrize("kind", ["recipe", "cluster"])
@pytest.mark.parametrize("content", [b"", b"\n", b"  \n\t\n\r\n", b"\xef\xbb\xbf"],
                         ids=["empty", "newline", "whitespace", "bom-only"])
def test_empty_file(kind: str, content: bytes, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _xfail_if_known(request)
    path = tmp_path / f"empty-{kind}" / f"{kind}.toml"
    path.parent.mkdir()
    path.write_bytes(content)
    run = run_inprocess("validate", str(path))
    diags = assert_clean_failure(run, f"recipegen validate {path}")
    hit = [d for d in diags if d["file"] == str(path) and d["line"] == "1" and "empty" in d["rest"]]
    assert hit, f"no `{path}:1:1: error: file is empty ...` line:\n{run.stderr}"
    for key in REQUIRED[kind]:
        assert _mentions(hit[0]["rest"], key), f"the message does not name the required key {key}: {hit[0][0]}"


def _one_error_naming(run: Run, context: str, *needles: str) -> re.Match:
    diags = assert_clean_failure(run, context)
    errors = [d for d in diags if d["sev"] == "error"]
    assert len(errors) == 1, f"{context}: expected one error line:\n{run.stderr}"
    for needle in needles:
        assert needle in errors[0][0], f"{context}: {needle!r} not in {errors[0][0]!r}"
    return errors[0]


def test_directory_without_recipe(tmp_path: Path) -> None:
    folder = tmp_path / "no-recipe-here"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a recipe\n")
    run = run_inprocess("validate", str(folder))
    _one_error_naming(run, f"recipegen validate {folder}", str(folder))


def test_directory_named_like_a_recipe_file(tmp_path: Path) -> None:
    """recipes/<id>/recipe.toml is a folder (a botched `mkdir -p`)."""
    folder = tmp_path / "dir-recipe" / "recipe.toml"
    folder.mkdir(parents=True)
    run = run_inprocess("validate", str(folder))
    _one_error_naming(run, f"recipegen validate {folder}", str(folder))


def test_directory_as_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """--cluster DIR: the user asked for that cluster; ignoring it silently would lint against another one."""
    _xfail_if_known(request)
    folder = tmp_path / "cluster.toml"
    folder.mkdir()
    recipe = "recipes/qwen3-coder-30b-a3b-fp8/recipe.toml"
    run = run_inprocess("validate", "--cluster", str(folder), recipe)
    _one_error_naming(run, f"recipegen validate --cluster {folder} {recipe}", str(folder))


def test_missing_cluster_option(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _xfail_if_known(request)
    missing = tmp_path / "no-such-cluster.toml"
    recipe = "recipes/qwen3-coder-30b-a3b-fp8/recipe.toml"
    run = run_inprocess("validate", "--cluster", str(missing), recipe)
    _one_error_naming(run, f"recipegen validate --cluster {missing} {recipe}", str(missing))


def test_broken_cluster_option(request: pytest.FixtureRequest) -> None:
    """--cluster BROKEN: its errors must be reported (build does), not swallowed."""
    _xfail_if_known(request)
    case = next(c for c in CASES if c.id == "clusters/range-ports")
    cluster = str(case.path.relative_to(ROOT))
    recipe = "recipes/qwen3-coder-30b-a3b-fp8/recipe.toml"
    run = run_inprocess("validate", "--cluster", cluster, recipe)
    assert_expected(run, case.expects, f"recipegen validate --cluster {cluster} {recipe}")


@pytest.mark.parametrize("name", ["recipe.toml", "cluster.toml", "missing.toml"])
def test_missing_file(name: str, tmp_path: Path) -> None:
    path = tmp_path / "gone" / name
    run = run_inprocess("validate", str(path))
    _one_error_naming(run, f"recipegen validate {path}", str(path))


def test_missing_file_subprocess(tmp_path: Path) -> None:
    path = tmp_path / "gone" / "recipe.toml"
    run = run_subprocess("validate", str(path))
    _one_error_naming(run, f"recipegen validate {path}", str(path))


def test_path_through_a_file(tmp_path: Path) -> None:
    """Unreadable even as root: a path component is a regular file (ENOTDIR)."""
    (tmp_path / "plain.toml").write_text('engine = "vllm"\n')
    path = tmp_path / "plain.toml" / "recipe.toml"
    run = run_inprocess("validate", str(path))
    _one_error_naming(run, f"recipegen validate {path}", str(path))


def test_dangling_symlink(tmp_path: Path) -> None:
    folder = tmp_path / "dangling"
    folder.mkdir()
    (folder / "recipe.toml").symlink_to(tmp_path / "nowhere" / "recipe.toml")
    path = folder / "recipe.toml"
    run = run_inprocess("validate", str(path))
    _one_error_naming(run, f"recipegen validate {path}", str(path))


def test_symlink_loop(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Unreadable even as root: recipe.toml -> loop.toml -> recipe.toml (ELOOP)."""
    _xfail_if_known(request)
    folder = tmp_path / "looping"
    folder.mkdir()
    (folder / "recipe.toml").symlink_to(folder / "loop.toml")
    (folder / "loop.toml").symlink_to(folder / "recipe.toml")
    path = folder / "recipe.toml"
    run = run_inprocess("validate", str(path))
    _one_error_naming(run, f"recipegen validate {path}", str(path))


@pytest.mark.parametrize("name, command", [
    ("recipe.toml", ["validate", "{}"]),
    ("cluster.toml", ["validate", "{}"]),
    ("cluster.toml", ["validate", "--cluster", "{}", "recipes/qwen3-coder-30b-a3b-fp8"]),
    ("cluster.toml", ["build", "--check", "--cluster", "{}"]),
], ids=["recipe", "cluster", "validate--cluster", "build--cluster"])
def test_permission_denied(name: str, command: list[str]) -> None:
    """As root, chmod 000 stops nothing: the case runs as an unprivileged user (setpriv), so CI (which runs as
    root) has no skip, from a copy of the project that user can reach wherever the checkout lies."""
    import tempfile

    from helpers.unprivileged import drop_root, project_copy, run_python

    as_user = drop_root("test_permission_denied")
    # Not tmp_path: pytest makes its base 0700, which another user cannot pass through.
    base = Path(tempfile.mkdtemp(prefix="recipegen-perm-"))
    try:
        base.chmod(0o755)
        path = base / "locked" / name
        path.parent.mkdir()
        path.parent.chmod(0o755)
        shutil.copyfile(CORPUS / "recipes" / "enum-engine.toml", path)
        path.chmod(0)
        args = [a.format(path) for a in command]
        if as_user is None:
            run = run_inprocess(*args)
        else:
            project = project_copy(base)
            proc = run_python(["-m", "generator", *args], as_user, project, {"HOME": str(base)})
            run = Run(proc.returncode, proc.stdout, proc.stderr)
        err = _one_error_naming(run, f"recipegen {' '.join(args)}", str(path))
        assert "ermission" in err["rest"], err[0]
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- what must pass --------------------------------------------------------------------------------------------

def test_valid_recipe_copy_passes(tmp_path: Path) -> None:
    """The assertions above can fail: a good recipe, copied out of the project, validates with exit 0."""
    src = ROOT / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml"
    dest = tmp_path / "qwen3-coder-30b-a3b-fp8" / "recipe.toml"
    dest.parent.mkdir()
    shutil.copyfile(src, dest)
    run = run_inprocess("validate", str(dest))
    assert run.crash is None, run.crash
    assert run.exit_code == 0, run.stderr
    assert not [d for d in run.diagnostics() if d["sev"] == "error"], run.stderr


SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "recipes").glob("*/recipe.toml")) + ["cluster.toml"]


@pytest.mark.parametrize("path", SHIPPED)
def test_shipped_files_validate(path: str) -> None:
    run = run_inprocess("validate", path)
    assert run.crash is None, run.crash
    assert run.exit_code == 0, f"recipegen validate {path}:\n{run.stderr}"


def test_whole_project_validates() -> None:
    run = run_inprocess("validate")
    assert run.crash is None, run.crash
    assert run.exit_code == 0, run.stderr


# --- the JSON Schemas ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["recipe", "cluster"])
def test_schema_is_valid_draft7(name: str) -> None:
    import jsonschema

    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text("utf-8"))
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)


def test_schema_command_writes_the_shipped_files(tmp_path: Path) -> None:
    out = tmp_path / "schema-out"
    run = run_inprocess("schema", "--out", str(out))
    assert run.crash is None, run.crash
    assert run.exit_code == 0, run.stderr
    shipped = sorted(p.name for p in SCHEMA_DIR.glob("*.json"))
    assert sorted(p.name for p in out.iterdir()) == shipped
    for name in shipped:
        assert (out / name).read_bytes() == (SCHEMA_DIR / name).read_bytes(), f"{name} differs from schema/{name}"


# --- the editors' TOML servers (taplo = Even Better TOML, tombi) agree -------------------------------------

def _editor(name: str) -> str:
    exe = shutil.which(name)
    if exe:
        return exe
    if os.environ.get("CI"):
        pytest.fail(f"`{name}` is not installed; CI must have it (pip install -e '.[test]')")
    reason = f"`{name}` is not installed (pip install {name}); outside CI this test is skipped"
    print(f"SKIP: {reason}")
    pytest.skip(reason)


EDITOR_CMDS = {"taplo": ["check"], "tombi": ["lint", "--offline"]}


def _run_editor(name: str, cwd: Path, *files: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", "RUST_LOG": "warn"}
    return subprocess.run([_editor(name), *EDITOR_CMDS[name], *files], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.mark.parametrize("tool", ["taplo", "tombi"])
def test_editor_accepts_shipped_files(tool: str) -> None:
    proc = _run_editor(tool, ROOT)
    assert proc.returncode == 0, f"{tool} rejects the shipped files:\n{proc.stdout}{proc.stderr}"


def test_tombi_no_warnings_on_shipped_files() -> None:
    proc = _run_editor("tombi", ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Warning" not in output, output


def _repo_copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(SCHEMA_DIR, repo / "schema")
    for config in (".taplo.toml", "tombi.toml"):
        shutil.copyfile(ROOT / config, repo / config)
    return repo


def _with_directive(case_file: Path, directive: str) -> str:
    lines = case_file.read_text("utf-8").splitlines(keepends=True)
    assert lines[0].startswith("#:schema")
    return directive + "\n" + "".join(lines[1:])


# Corpus cases no JSON Schema can catch (rules across values): editors accept them, recipegen does not.
EDITOR_BLIND = {"clusters/duplicate-node-name": "a rule across nodes; a JSON Schema cannot state it",
                "clusters/duplicate-node-address-context": "a rule across nodes; a JSON Schema cannot state it",
                "clusters/range-duration-overflow": "the `go-duration` format: editors skip unknown formats",
                "recipes/range-duration-int64": "the `docker-start-period` format beyond int64: a sum no pattern adds",
                "clusters/range-duration-int64": "the `go-duration` format: editors skip unknown formats",
                "recipes/mount-targets-normalised": "lint rule mount-target: paths compared after normalising",
                "clusters/pass-env-clashes": "lint: names compared with the env tables and the compiler's",
                "recipes/secret-new-places": "lint rule secret: token shapes and secret names, and a mod's files",
                "clusters/owned-ray-flags": "lint rule owned-flag: ray_args are shell words, split before checking",
                "clusters/port-collision": "lint rule port-collision: two keys compared, defaults included"}
# taplo reads TOML into JSON values: 2.0 is then an integer (draft-07) and a date a string; tombi keeps TOML's types.
TOOL_BLIND = {"taplo": {"recipes/type-float-integers": "2.0 is an integer to a JSON Schema",
                        "recipes/type-toml-dates": "taplo hands dates to the schema as strings",
                        "clusters/type-dates-and-floats": "both of the above"}}


@pytest.mark.parametrize("tool", ["taplo", "tombi"])
def test_editors_reject_the_corpus(tool: str, tmp_path: Path) -> None:
    """Every single-file case a schema can catch is flagged by the editor too, with the same schemas and
    configuration (taplo only checks files its .taplo.toml includes: hence the repository layout)."""
    repo = _repo_copy(tmp_path)
    placed = {}
    for case in CASES:
        group = case.id.split("/")[0]
        if group == "multi" or case.id in EDITOR_BLIND or case.id in TOOL_BLIND.get(tool, {}):
            continue
        data = case.path.read_bytes()
        if group == "recipes":
            dest, directive = repo / "recipes" / case.path.stem / "recipe.toml", b"../../schema/recipe.schema.json"
        else:
            dest, directive = repo / "clusters" / case.path.name, b"../schema/cluster.schema.json"
        if case.has_directive:
            data = b"#:schema " + directive + b"\n" + data.split(b"\n", 1)[1]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        placed[case.id] = dest
    proc = _run_editor(tool, repo)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    passed = [cid for cid, dest in placed.items() if str(dest.relative_to(repo)) not in output]
    assert not passed, f"{tool} accepts corpus files recipegen rejects: {passed}\n{output}"


@pytest.mark.parametrize("tool", ["taplo", "tombi"])
def test_editor_rejects_misspelt_recipe_key(tool: str, tmp_path: Path) -> None:
    repo = _repo_copy(tmp_path)
    case = CORPUS / "recipes" / "misspelt-top-level-keys.toml"
    target = repo / "recipes" / "misspelt-top-level-keys" / "recipe.toml"
    target.parent.mkdir(parents=True)
    target.write_text(_with_directive(case, "#:schema ../../schema/recipe.schema.json"), "utf-8")
    proc = _run_editor(tool, repo)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"{tool} accepts a recipe with misspelt keys:\n{output}"
    assert "docker_imag" in output and "shm_szie" in output, output


@pytest.mark.parametrize("tool", ["taplo", "tombi"])
def test_editor_rejects_misspelt_cluster_key(tool: str, tmp_path: Path) -> None:
    repo = _repo_copy(tmp_path)
    case = CORPUS / "clusters" / "misspelt-keys.toml"
    (repo / "cluster.toml").write_text(_with_directive(case, "#:schema ./schema/cluster.schema.json"), "utf-8")
    proc = _run_editor(tool, repo)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"{tool} accepts a cluster with misspelt keys:\n{output}"
    assert "master_prot" in output and "contxt" in output, output


def test_the_docs_give_the_editor_commands_these_tests_run() -> None:
    """A newcomer copies the editors page's terminal check: it must be the command that really checks."""
    page = (ROOT / "docs" / "editors.md").read_text("utf-8")
    for tool, args in EDITOR_CMDS.items():
        assert f"\n{tool} {' '.join(args)} " in page, f"docs/editors.md does not show `{tool} {' '.join(args)}`"


def test_tombi_given_a_folder_lints_nothing(tmp_path: Path) -> None:
    """Why docs/editors.md says to name files: `tombi lint --offline recipes` passes a broken recipe. When tombi
    starts looking inside folders this fails, and the page's warning must go."""
    repo = _repo_copy(tmp_path)
    case = CORPUS / "recipes" / "misspelt-top-level-keys.toml"
    target = repo / "recipes" / "misspelt-top-level-keys" / "recipe.toml"
    target.parent.mkdir(parents=True)
    target.write_text(_with_directive(case, "#:schema ../../schema/recipe.schema.json"), "utf-8")
    folder = _run_editor("tombi", repo, "recipes")
    assert folder.returncode == 0 and "No files linted" in folder.stdout + folder.stderr, folder
    whole = _run_editor("tombi", repo)
    assert whole.returncode != 0 and "docker_imag" in whole.stdout + whole.stderr
