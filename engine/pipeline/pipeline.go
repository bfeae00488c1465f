package pipeline

import (
	"strings"
	"time"
)

// Durability settings for the event log (docs/spec.md §4).
const (
	DurabilityAlways = "always"
	DurabilityBatch  = "batch"
)

// Handler lists: steps that run once every step of steps: has settled.
const (
	HandlerOnFailure = "on_failure" // when the task failed
	HandlerFinally   = "finally"    // always, after on_failure
)

// Retry policies (docs/spec.md §2).
const (
	RetryNone        = "none"
	RetryFixed       = "fixed"
	RetryExponential = "exponential"
)

// Pipeline is a loaded and validated pipeline file. Every default is already
// applied: a Step's MaxRetries, Durability and RetryPolicy are final.
//
// A hub's work message carries a Pipeline with one Step (remote.Work), in
// JSON with the fields' Go names. Its fields, and Defaults' and Step's, are
// tagged omitzero: most are zero, and leaving them out takes a plain
// step's message from about 1.9 KB to a third of that, which every worker
// decodes and every hub node stores; a field left out decodes to the same
// zero value (a nil map stays nil, an empty one is written).
type Pipeline struct {
	// Path is the file as the user named it; Dir is its folder, absolute.
	Path string `json:",omitzero"`
	Dir  string `json:",omitzero"`
	// Source is the file's bytes, used for the pipeline digest.
	Source []byte `json:",omitzero"`

	TaskName         string            `json:",omitzero"`
	MaxRetries       int               `json:",omitzero"`
	RetryDelay       time.Duration     `json:",omitzero"`
	MaxRetryDelay    time.Duration     `json:",omitzero"` // 0: no cap
	Parallelism      int               `json:",omitzero"` // 0: one per CPU
	Durability       string            `json:",omitzero"`
	Vars             map[string]string `json:",omitzero"` // the file's vars: (no --var applied)
	ResumeFrom       string            `json:",omitzero"`
	MaxDirtyRestarts int               `json:",omitzero"`
	Modules          []string          `json:",omitzero"` // folders, relative to Dir
	Isolation        string            `json:",omitzero"` // "" or "process": default for Lua steps
	// Secrets are read when a run starts, given to steps, and never
	// written (secrets:); SecretVars are vars whose values are masked the
	// same way (secret_vars:).
	Secrets    []Secret `json:",omitzero"`
	SecretVars []string `json:",omitzero"`
	// Resources are named resources and how many steps may hold each at
	// once (resources:).
	Resources map[string]int `json:",omitzero"`
	// Defaults are the step settings that defaults: (and env:, working_dir:
	// at the top level) give every step; already applied to Steps.
	Defaults Defaults  `json:",omitzero"`
	Steps    []*Step   `json:",omitzero"`
	Schedule *Schedule `json:",omitzero"` // nil: none (apollo serve runs it on schedule)
	// Notify lists who is told of the task's events (notify:); SLA is the
	// time after the task's start by which it should be complete (sla:),
	// 0 for none (docs/spec.md §2.13).
	Notify []Notify      `json:",omitzero"`
	SLA    time.Duration `json:",omitzero"`
	// Triggers start runs besides the schedule (triggers:); TriggerVars
	// are the {{trigger.…}} placeholders its templates use, empty in a
	// run no trigger started.
	Triggers    []Trigger `json:",omitzero"`
	TriggerVars []string  `json:",omitzero"`

	// MaxInstances bounds the instances of one foreach or matrix step,
	// MaxSteps the pipeline's steps once expanded (max_instances:,
	// max_steps:; docs/spec.md §2.9); 0 when the file does not set them,
	// read through InstanceLimit.
	MaxInstances, MaxSteps int `json:",omitzero"`
	// ContainerEngine is container.engine: "podman", "docker", or "" for
	// the machine's (APOLLO_CONTAINER_ENGINE, else podman).
	ContainerEngine string `json:",omitzero"`
}

// Defaults are what the top level sets for every step that does not set it
// itself (docs/spec.md §2).
type Defaults struct {
	RetryPolicy string            `json:",omitzero"`
	MaxRetries  int               `json:",omitzero"`
	Timeout     time.Duration     `json:",omitzero"`
	MemoryMB    int               `json:",omitzero"`
	Env         map[string]string `json:",omitzero"` // defaults.env, then the top-level env:
	WorkingDir  string            `json:",omitzero"`
	Shell       []string          `json:",omitzero"` // defaults.shell (see Step)
	// Allow and HTTPHosts are defaults.allow (see Step).
	Allow     []string `json:",omitzero"`
	HTTPHosts []string `json:",omitzero"`
	// EnvFile holds the variables of env_file:, under every step's env.
	EnvFile map[string]string `json:",omitzero"`
	// Container is defaults.image, for command steps.
	Container *Container `json:",omitzero"`
}

// Step is one node of the DAG.
type Step struct {
	ID   string `json:",omitzero"`
	Line int    `json:",omitzero"` // line of the step's "id" key, for messages

	// Notify lists who is told of this step's events (notify:); not part
	// of the definition digest.
	Notify []Notify `json:",omitzero"`

	// Exactly one body is set.
	Command string `json:",omitzero"`
	Lua     string `json:",omitzero"`
	Script  string `json:",omitzero"` // path relative to the pipeline's folder
	Uses    string `json:",omitzero"` // module name
	// Run is a sub-pipeline: a pipeline file, relative to this one's
	// folder, run as a task of its own (docs/spec.md §2.11).
	Run string `json:",omitzero"`

	// At most one cleanup hook is set.
	CleanupCommand string `json:",omitzero"`
	CleanupLua     string `json:",omitzero"`
	CleanupScript  string `json:",omitzero"`

	// LuaLine and CleanupLuaLine are the lines of the file that hold the
	// first line of Lua and CleanupLua, when the body's lines are the
	// file's lines one for one (a literal block, or one line); 0 otherwise.
	// Lua errors name the file's lines through them.
	LuaLine, CleanupLuaLine int `json:",omitzero"`

	DependsOn   []string          `json:",omitzero"`
	Optional    bool              `json:",omitzero"`
	Timeout     time.Duration     `json:",omitzero"` // 0: none
	RetryPolicy string            `json:",omitzero"`
	MaxRetries  int               `json:",omitzero"`
	Durability  string            `json:",omitzero"`
	Env         map[string]string `json:",omitzero"`
	With        map[string]any    `json:",omitzero"` // parameters for uses, as decoded from YAML
	MemoryMB    int               `json:",omitzero"` // 0: default
	Isolation   string            `json:",omitzero"`
	// WorkingDir is where a shell body runs, relative to the pipeline's
	// folder (or absolute); "" is the workspace.
	WorkingDir string `json:",omitzero"`
	// Shell is the interpreter of the step's shell bodies (command and
	// cleanup_command), as shell: names it: nil for sh, the default
	// (/bin/sh with errexit, and pipefail where it has it); ShellBash; or
	// an explicit command line, which gets the body as its last argument
	// and nothing else (docs/spec.md §2).
	Shell []string `json:",omitzero"`
	// Foreach makes the step the template of instances (foreach:, matrix:);
	// nil for a plain step. Expand turns it into its instances.
	Foreach *Foreach `json:",omitzero"`
	// Item is what an instance of a foreach step is for: its item, or its
	// matrix values by axis ("item.NAME" keys); InstanceOf names the step
	// it is an instance of.
	Item       map[string]string `json:",omitzero"`
	InstanceOf string            `json:",omitzero"`
	// SecretItem says the instance's item holds a secret (an item of a
	// secret var, or of an output holding a secret): the instance is
	// named by its index, not its item, and the item is masked.
	SecretItem bool `json:",omitzero"`
	// Handler is the handler list the step belongs to (HandlerOnFailure,
	// HandlerFinally), or "" for a step of steps:. A handler is optional.
	Handler string `json:",omitzero"`
	// Allow are the capabilities a Lua step is granted beyond fs, idem,
	// json, log and digest: "exec", "http" (allow:). HTTPHosts, when not
	// nil, are the hosts apollo.http may reach ("*.example.com" for the
	// hosts under a domain).
	Allow     []string `json:",omitzero"`
	HTTPHosts []string `json:",omitzero"`
	// Resources are the named resources the step holds while it runs
	// (uses_resource:).
	Resources []string `json:",omitzero"`
	// When is a Lua expression evaluated when the step becomes ready; a
	// false value skips the step (docs/spec.md §2). "" runs it always.
	// WhenLine is the file line of its first line, as LuaLine.
	When     string `json:",omitzero"`
	WhenLine int    `json:",omitzero"`
	// OutputRefs are the ancestors, beyond DependsOn, whose outputs the
	// step names ({{outputs.STEP}}, ctx.outputs.STEP), as validation found
	// them.
	OutputRefs []string `json:",omitzero"`
	Pool       string   `json:",omitzero"` // the hub's worker pool that runs it (docs/spec.md §8); "": the run's default
	// Cache, when set, lets the step's result come from an earlier run of
	// the pipeline with the same inputs (cache:). Inputs are files whose
	// content is part of its key (inputs:); Outputs files it makes, which
	// the cache saves and restores (outputs:, cache.paths). Both are
	// relative to where the step runs, and templated.
	Cache   *Cache   `json:",omitzero"`
	Inputs  []string `json:",omitzero"`
	Outputs []string `json:",omitzero"`
	// Container, when set, runs the command in a container (image:); it is
	// shared with defaults: and never changed once loaded.
	Container *Container `json:",omitzero"`

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

// HasCleanup reports whether the step has a cleanup hook. A module used
// with `uses` may bring its own, which only loading it tells; it counts.
func (s *Step) HasCleanup() bool {
	return s.CleanupCommand != "" || s.CleanupLua != "" || s.CleanupScript != "" || s.Uses != ""
}

// AllowsHost reports whether the step's apollo.http may reach host.
func (s *Step) AllowsHost(host string) bool {
	if s.HTTPHosts == nil {
		return true
	}
	host = strings.ToLower(host)
	for _, h := range s.HTTPHosts {
		if h == host || (strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:])) {
			return true
		}
	}
	return false
}
