package pipeline

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// Container engines (container: {engine: ...}).
const (
	EnginePodman = "podman"
	EngineDocker = "docker"
)

// Container runs a shell step's body in a container of Image through an
// OCI engine's CLI (image:; docs/spec.md §2.12).
type Container struct {
	// Image is NAME[:TAG|@DIGEST], as written.
	Image string
	// Pull is "missing" (the default), "always" or "never".
	Pull string
	// Mounts are mounted besides the workspace, read-only unless Writable.
	Mounts []Mount
	// User, CPUs, Memory and Network are passed to the engine as they are
	// ("" when not set); Network is "none", "host" or "default".
	User, CPUs, Memory, Network string
}

// Mount is one mount of a container step: Source, absolute (relative to
// the pipeline's folder when written relative), at Target in the container.
// A Source outside the pipeline's folder needs Outside.
type Mount struct {
	Source, Target string
	Writable       bool
	Outside        bool
}

// imageRef is what an image may be named: a registry/name, a tag or a
// digest, nothing an engine's CLI could read as a flag.
// Each pattern of the package is compiled on first use, not when the
// binary starts: every command links this package, few validate images.
var imageRef = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?(/[a-z0-9._-]+)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`)
})

var (
	memorySize = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]+[bkmg]?$`) })
	userName   = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$`)
	})
)

// ValidImage reports whether ref names an image the way image: takes it.
func ValidImage(ref string) bool { return len(ref) <= 255 && imageRef().MatchString(ref) }

// image decodes image: — a name, or a mapping of name and the container's
// settings.
func (si *stepInfo) image(kv keyValue) {
	at := si.at
	v := deref(kv.v)
	c := &Container{}
	if v.Kind == yaml.ScalarNode {
		c.Image, _ = si.imageName(kv.key, v)
	} else {
		kvs, ok := at.mapping(kv.key, v)
		if !ok {
			return
		}
		for _, p := range kvs {
			si.imageSetting(c, p)
		}
		if c.Image == "" {
			at.errf(v.Line, "image has no name; add name: IMAGE[:TAG|@DIGEST]")
			return
		}
	}
	if c.Image == "" {
		return
	}
	if !ValidImage(c.Image) {
		at.errf(v.Line, "image %q is not an image name; write NAME[:TAG|@DIGEST], such as docker.io/library/alpine:3.20", snippet(c.Image))
		return
	}
	si.s.Container = c
}

// imageName reads an image's name: a string, not a number or a boolean.
func (si *stepInfo) imageName(key string, v *yaml.Node) (string, bool) {
	if v.Tag != "!!str" && v.Tag != "!!null" {
		si.at.errf(v.Line, "%s must be an image name such as alpine:3.20, not %s", key, describe(v))
		return "", false
	}
	return si.at.nonEmpty(key, v)
}

var imageKeys = []string{"name", "pull", "mounts", "user", "cpus", "memory", "network"}

// imageSetting decodes one key of image:'s mapping into c.
func (si *stepInfo) imageSetting(c *Container, p keyValue) {
	at := si.at
	key := "image." + p.key
	line := deref(p.v).Line
	switch p.key {
	case "name":
		c.Image, _ = si.imageName(key, deref(p.v))
	case "pull":
		c.Pull, _ = at.choice(key, p.v, "missing", "always", "never")
	case "network":
		c.Network, _ = at.choice(key, p.v, "none", "host", "default")
	case "user":
		if u, ok := at.nonEmpty(key, p.v); ok {
			if !userName().MatchString(u) {
				at.errf(line, "%s %q is not a user; write NAME or UID[:GID]", key, snippet(u))
				return
			}
			c.User = u
		}
	case "cpus":
		if s, ok := at.nonEmpty(key, p.v); ok {
			if f, err := strconv.ParseFloat(s, 64); err != nil || f <= 0 || f > 4096 {
				at.errf(line, "%s %q is not a number of CPUs; write a positive number such as 1.5", key, snippet(s))
				return
			}
			c.CPUs = s
		}
	case "memory":
		if s, ok := at.nonEmpty(key, p.v); ok {
			s = strings.ToLower(s)
			if !memorySize().MatchString(s) {
				at.errf(line, "%s %q is not a size; write bytes with an optional unit b, k, m or g, such as 512m", key, snippet(s))
				return
			}
			c.Memory = s
		}
	case "mounts":
		items, _ := at.list(key, "mounts", p.v)
		for _, it := range items {
			if m, ok := si.mount(key, it); ok {
				c.Mounts = append(c.Mounts, m)
			}
		}
	default:
		at.unknownKey(p.k, imageKeys, nil)
	}
}

// mount decodes one mount: "SOURCE:TARGET[:OPTIONS]", OPTIONS a comma list
// of rw, ro and outside.
func (si *stepInfo) mount(key string, n *yaml.Node) (Mount, bool) {
	at := si.at
	s, ok := at.nonEmpty(key, n)
	if !ok {
		return Mount{}, false
	}
	line := deref(n).Line
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !filepath.IsAbs(parts[1]) {
		at.errf(line, "mount %q: write SOURCE:TARGET[:rw][,outside], TARGET an absolute path in the container", snippet(s))
		return Mount{}, false
	}
	m := Mount{Source: parts[0], Target: filepath.Clean(parts[1])}
	if len(parts) == 3 {
		for _, o := range strings.Split(parts[2], ",") {
			switch o {
			case "rw":
				m.Writable = true
			case "ro":
			case "outside":
				m.Outside = true
			default:
				at.errf(line, "mount %q: unknown option %q; options are rw, ro and outside", snippet(s), snippet(o))
				return Mount{}, false
			}
		}
	}
	if !filepath.IsAbs(m.Source) {
		m.Source = filepath.Join(si.l.p.Dir, m.Source)
	}
	m.Source = filepath.Clean(m.Source)
	if rel, err := filepath.Rel(si.l.p.Dir, m.Source); !m.Outside && (err != nil || rel == ".." || strings.HasPrefix(rel, "../")) {
		at.errf(line, "mount %q: %s is outside the pipeline's folder; add the option outside (%s:%s:outside) if the step may see it",
			snippet(s), parts[0], parts[0], parts[1])
		return Mount{}, false
	}
	return m, true
}

// containerTop decodes the top-level container: {engine: podman|docker}.
func (l *loader) containerTop(kv keyValue) {
	kvs, ok := l.top().mapping(kv.key, kv.v)
	if !ok {
		return
	}
	for _, p := range kvs {
		if p.key != "engine" {
			l.top().unknownKey(p.k, []string{"engine"}, nil)
			continue
		}
		l.p.ContainerEngine, _ = l.top().choice("container.engine", p.v, EnginePodman, EngineDocker)
	}
}

// checkImage reports image: on a step that has no shell body, and drops a
// default image from such a step.
func checkImage(si *stepInfo, body string) {
	if body == "command" {
		return
	}
	if line, ok := si.lineOf("image"); ok && body != "" {
		si.at.errf(line, "image applies to command steps only; %s does not run in a container", body)
	}
	si.s.Container = nil
}
