package executor

import (
	"encoding/json"
	"testing"
)

// BenchmarkIsolatedJobCodec encodes and decodes, once per iteration, what
// a Lua process and its runner exchange for a no-op step of a chain: the
// job (isolatedJob, JSON) and its result. It is the codec's share of what a
// step in a Lua process pays beyond one in the runner (docs/performance.md,
// "Lua steps"); job-bytes is the job's size.
func BenchmarkIsolatedJobCodec(b *testing.B) {
	job := isolatedJob{PipelinePath: "/srv/jobs/nightly/pipeline.yaml", PipelineDir: "/srv/jobs/nightly",
		Step: isolatedStep{ID: "s17", Lua: "return nil", LuaLine: 40}, StepID: "s17", TaskID: "nightly",
		InputDigest:  "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Vars:         map[string]string{"step_id": "s17", "task_id": "nightly", "run_id": "20261206T073000Z"},
		ArtifactsDir: "/srv/jobs/nightly/.apollo/artifacts/nightly", StateDir: "/srv/jobs/nightly/.apollo",
		Dir: "/srv/jobs/nightly", Workdir: "/srv/jobs/nightly", OutputPath: "/srv/jobs/nightly/.apollo/output/nightly/s17.0.log",
		Env: []string{"APOLLO_TASK_ID=nightly", "APOLLO_STEP_ID=s17", "APOLLO_RETRY=0", "APOLLO_ATTEMPT=/srv/jobs/nightly/.apollo/logs/nightly.jsonl#s17#0"}}
	result := isolatedResult{OutputDigest: "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
	var size int
	for b.Loop() {
		raw, err := json.Marshal(job)
		if err != nil {
			b.Fatal(err)
		}
		size = len(raw)
		var got isolatedJob
		if err := json.Unmarshal(raw, &got); err != nil {
			b.Fatal(err)
		}
		raw, err = json.Marshal(result)
		if err != nil {
			b.Fatal(err)
		}
		var ans isolatedResult
		if err := json.Unmarshal(raw, &ans); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size), "job-bytes")
}
