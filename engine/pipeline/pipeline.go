package pipeline

import "time"

// Durability settings for the event log (docs/spec.md §4).
const (
	DurabilityAlways = "always"
	DurabilityBatch  = "batch"
)

// Retry policies (docs/spec.md §2).
const (
	RetryNone        = "none"
	RetryFixed       = "fixed"
	RetryExponential = "exponential"
)

// Pipeline is a loaded and validated pipeline file. Every default is already
// applied: a Step's MaxRetries, Durability and RetryPolicy are final.
type Pipeline struct {
	// Path is the file as the user named it; Dir is its folder, absolute.
	Path string
	Dir  string
	// Source is the file's bytes, used for the pipeline digest.
	Source []byte

	TaskName         string
	MaxRetries       int
	RetryDelay       time.Duration
	MaxRetryDelay    time.Duration // 0: no cap
	Parallelism      int           // 0: one per CPU
	Durability       string
	Vars             map[string]string // the file's vars: (no --var applied)
	ResumeFrom       string
	MaxDirtyRestarts int
	Modules          []string // folders, relative to Dir
	Isolation        string   // "" or "process": default for Lua steps
	Steps            []*Step
	Schedule         *Schedule // nil: none (apollo serve runs it on schedule)
}

// Step is one node of the DAG.
type Step struct {
	ID   string
	Line int // line of the step's "id" key, for messages

	// Exactly one body is set.
	Command string
	Lua     string
	Script  string // path relative to the pipeline's folder
	Uses    string // module name

	// At most one cleanup hook is set.
	CleanupCommand string
	CleanupLua     string
	CleanupScript  string

	DependsOn   []string
	Optional    bool
	Timeout     time.Duration // 0: none
	RetryPolicy string
	MaxRetries  int
	Durability  string
	Env         map[string]string
	With        map[string]any // parameters for uses, as decoded from YAML
	MemoryMB    int            // 0: default
	Isolation   string

	// depIdx holds the indexes in Pipeline.Steps of DependsOn, as Load
	// resolved them.
	depIdx []int32
}

// Step returns the step with the given id, or nil.
func (p *Pipeline) Step(id string) *Step {
	for _, s := range p.Steps {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// hasCleanup reports whether the step has a cleanup hook. A module used
// with `uses` may bring its own, which only loading it tells; it counts.
func (s *Step) HasCleanup() bool {
	return s.CleanupCommand != "" || s.CleanupLua != "" || s.CleanupScript != "" || s.Uses != ""
}
