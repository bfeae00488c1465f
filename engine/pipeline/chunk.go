package pipeline

// InlineChunk names inline Lua of a step (suffix "" for a lua: body, ".cleanup" for a
// cleanup_lua: hook, ".when" for a when: expression) by the pipeline file at path, numbered
// from the file line its first line is on (line), so that errors and tracebacks name the
// file's own lines: "pipeline.yaml:12: ...". Lua whose lines are not the file's (line 0) is
// named "pipeline.yaml[step]" plus suffix, its lines its own (first is 1).
func InlineChunk(path, id, suffix string, line int) (name string, first int) {
	if line <= 0 {
		return path + "[" + id + "]" + suffix, 1
	}
	return path, line
}
