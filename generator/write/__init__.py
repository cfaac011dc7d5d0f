"""Write: every generated file read back against the compose-spec, then out/ written all or nothing."""
