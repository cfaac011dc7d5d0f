"""sparkrun's `benchmark:` block as the recipe's [bench] table, key for key (the same names: framework, args,
metadata, timeout, schedule and llama-benchy options given directly, as sparkrun's BenchmarkSpec reads them).

Whether the table exists is the recipe schema's to say: where it has no `bench`, the block is named as not
carried yet; where it has one, each key the schema accepts is carried, and any other is named with the reason.
"""

from __future__ import annotations

from typing import Any

from generator.importers.base import Field, NotCarried
from generator.importers.yamlfile import YamlFile


def _bench_schema() -> dict[str, Any] | None:
    from generator.read.schemas import schema

    full = schema("recipe")
    bench = full.get("properties", {}).get("bench")
    if bench is None:
        return None
    return {"definitions": full.get("definitions", {}), "type": "object", "properties": {"bench": bench}}


def bench_table(doc: YamlFile) -> tuple[list[Field], list[NotCarried]]:
    block = doc.data.get("benchmark")
    if block is None:
        return [], []
    line = doc.line("benchmark")
    if not isinstance(block, dict):
        return [], [NotCarried("benchmark", line, "not a mapping: sparkrun ignores it too")]
    checker = _bench_schema()
    if checker is None:
        return [], [NotCarried("benchmark", line, "not carried yet: this recipegen has no [bench] table; run the "
                                                  "benchmark by hand")]
    import jsonschema

    known = checker["properties"]["bench"].get("properties", {})
    named = [NotCarried(f"benchmark.{k}", doc.line("benchmark", str(k)), "not a [bench] key recipegen knows")
             for k in block if k not in known]
    table = {str(k): v for k, v in block.items() if k in known}
    for error in jsonschema.Draft7Validator(checker).iter_errors({"bench": table}):
        key = str(error.absolute_path[1]) if len(error.absolute_path) > 1 else None
        if key in table:
            del table[key]
            named.append(NotCarried(f"benchmark.{key}", doc.line("benchmark", key),
                                    f"[bench] refuses it: {error.message}"))
    return [Field(k, v, f"{doc.name}: benchmark.{k}") for k, v in table.items()], named
