package pipeline

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"apollo/engine/template"
)

// Secret is where the value of a secret comes from: apollo's environment
// (or, failing it, the pipeline's env_file: files), a file, or a command's
// standard output. Its value is read when a run
// starts, given to steps as the environment variable of its name (and
// ctx.secrets in Lua), and never written: apollo masks it as *** wherever
// it prints or records text (docs/spec.md §2.11).
type Secret struct {
	Name    string
	Env     string // the environment variable that holds it, or else the env files' variable
	File    string // a file that holds it (relative to the pipeline's folder)
	Command string // a command (sh -c) that prints it
}

// secrets decodes secrets: a list of names, each read from the environment
// ([NAME], short for NAME: env), or a mapping NAME: env | {env: VAR} |
// {file: PATH} | {command: CMD}.
func (l *loader) secrets(kv keyValue) {
	top := l.top()
	if v := deref(kv.v); v.Kind == yaml.SequenceNode {
		l.secretNames(v)
		return
	}
	if v := deref(kv.v); v.Kind != yaml.MappingNode && !(v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
		top.errf(v.Line, "secrets must be a list of names or a mapping of names to sources, not %s", describe(v))
		return
	}
	kvs, _ := top.mapping(kv.key, kv.v)
	for _, p := range kvs {
		if !template.ValidName(p.key) {
			top.errf(p.k.Line, "secret name %q must be letters, digits and _, not starting with a digit (it names an environment variable)", snippet(p.key))
			continue
		}
		sec := Secret{Name: p.key}
		v := deref(p.v)
		switch {
		case v.Kind == yaml.ScalarNode && v.Value == "env":
			sec.Env = p.key
		case v.Kind == yaml.MappingNode:
			src := top.pairs(v)
			if len(src) != 1 {
				top.errf(v.Line, "secrets.%s takes one of env, file or command", p.key)
				continue
			}
			s, ok := top.nonEmpty("secrets."+p.key+"."+src[0].key, src[0].v)
			if !ok {
				continue
			}
			switch src[0].key {
			case "env":
				sec.Env = s
			case "file":
				sec.File = s
			case "command":
				sec.Command = s
			default:
				top.errf(src[0].k.Line, "secrets.%s: unknown source %q%s; use env, file or command", p.key, snippet(src[0].key),
					DidYouMean(src[0].key, []string{"env", "file", "command"}))
				continue
			}
		default:
			top.errf(v.Line, "secrets.%s must be env, or {env: VAR}, {file: PATH} or {command: CMD}, not %s", p.key, describe(v))
			continue
		}
		l.p.Secrets = append(l.p.Secrets, sec)
	}
}

// secretNames decodes secrets: [NAME, ...]: each NAME: env.
func (l *loader) secretNames(v *yaml.Node) {
	top := l.top()
	items, _ := top.list("secrets", "names", v)
	seen := map[string]bool{}
	for _, item := range items {
		name, ok := top.nonEmpty("secrets", item)
		switch {
		case !ok:
		case !template.ValidName(name):
			top.errf(item.Line, "secrets: %q is not a variable name: letters, digits and _, not starting with a digit", snippet(name))
		case seen[name]:
			top.errf(item.Line, "secrets lists %q twice", name)
		default:
			seen[name] = true
			l.p.Secrets = append(l.p.Secrets, Secret{Name: name, Env: name})
		}
	}
}

// secretVars decodes secret_vars: the vars whose values apollo masks.
func (l *loader) secretVars(kv keyValue) {
	top := l.top()
	items, _ := top.list(kv.key, "var names", kv.v)
	for _, item := range items {
		if s, ok := top.nonEmpty(kv.key, item); ok {
			l.p.SecretVars = append(l.p.SecretVars, s)
			l.secretVarLines = append(l.secretVarLines, item.Line)
		}
	}
}

// checkSecretVars checks that each secret var is declared.
func (l *loader) checkSecretVars() {
	for i, name := range l.p.SecretVars {
		if _, ok := l.p.Vars[name]; !ok {
			l.top().errf(l.secretVarLines[i], "secret_vars names %q, which is not declared under vars:", name)
		}
	}
}

// envFile decodes env_file: a dotenv file (or a list), relative to the
// pipeline's folder, read now: its variables are every step's environment,
// under the top-level env: and each step's own.
func (l *loader) envFile(kv keyValue) {
	top := l.top()
	v := deref(kv.v)
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		items, _ = top.list(kv.key, "files", v)
	}
	for _, item := range items {
		path, ok := top.nonEmpty(kv.key, item)
		if !ok {
			continue
		}
		full := path
		if !filepath.IsAbs(full) {
			full = filepath.Join(l.p.Dir, path)
		}
		vars, err := readDotenv(full)
		if err != nil {
			top.errf(item.Line, "env_file %q: %v", path, err)
			continue
		}
		if l.p.Defaults.EnvFile == nil {
			l.p.Defaults.EnvFile = map[string]string{}
		}
		for k, v := range vars {
			top.template("env_file "+path+": "+k, item, v, false) // values may hold {{var}}, as env: values do
			l.p.Defaults.EnvFile[k] = v
		}
	}
}

// readDotenv reads a dotenv file: NAME=VALUE lines ("export " allowed),
// # comments and blank lines; a value may be quoted, "..." with \n, \" and
// \\ escapes, '...' taken as it is.
func readDotenv(path string) (map[string]string, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s", pathCause(err))
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("is not a regular file")
	case fi.Size() > 1<<20:
		return nil, fmt.Errorf("is larger than 1 MiB")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s", pathCause(err))
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !template.ValidName(k) {
			return nil, fmt.Errorf("line %d is not NAME=VALUE", n)
		}
		v = strings.TrimSpace(v)
		switch {
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			v = v[1 : len(v)-1]
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			u, err := strconv.Unquote(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s is not a valid quoted value", n, snippet(v))
			}
			v = u
		default:
			if i := strings.Index(v, " #"); i >= 0 {
				v = strings.TrimSpace(v[:i])
			}
		}
		vars[k] = v
	}
	return vars, nil
}
