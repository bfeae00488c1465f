package stdlib

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFS(t *testing.T) {
	env := newFakeEnv(t)
	got := mustRun(t, env, `
		local fs = require("apollo.fs")
		local out = {}
		fs.write("a/b/c.txt", "hello")
		fs.append("a/b/c.txt", ", world")
		fs.append("a/log.txt", "one\n")
		out.read = fs.read("a/b/c.txt")
		out.exists = {fs.exists("a/b/c.txt"), fs.exists("a/b"), fs.exists("nope")}
		fs.mkdir("a/x/y/z")
		fs.mkdir("a/x/y/z")
		out.list = fs.list("a")
		local st = fs.stat("a/b/c.txt")
		out.size, out.is_dir = st.size, st.is_dir
		out.dir_is_dir = fs.stat("a/x").is_dir
		out.mtime_positive = st.mtime > 1e9
		fs.rename("a/b/c.txt", "moved/c.txt")
		out.moved = {fs.exists("a/b/c.txt"), fs.read("moved/c.txt")}
		fs.remove("moved/c.txt")
		fs.remove("moved/c.txt")
		fs.remove("a/x", {recursive = true})
		out.after = fs.list("a")
		return out
	`)
	want := `{
		"read": "hello, world",
		"exists": [true, true, false],
		"list": ["b", "log.txt", "x"],
		"size": 12, "is_dir": false, "dir_is_dir": true, "mtime_positive": true,
		"moved": [false, "hello, world"],
		"after": ["b", "log.txt"]
	}`
	if !jsonEqual(t, got, want) {
		t.Errorf("fs script = %v\nwant %s", got, want)
	}
	for _, tt := range []struct{ name, src, want string }{
		{"read missing", `fs.read("nope")`, "no such file"},
		{"read folder", `fs.read("a")`, "is a folder"},
		{"stat missing", `fs.stat("nope")`, "no such file"},
		{"remove non-empty folder", `fs.remove("a")`, "fs.remove"},
		{"remove workspace", `fs.remove(".", {recursive = true})`, "refusing"},
		{"empty path", `fs.read("")`, "path is empty"},
		{"path not a string", `fs.read({})`, "path must be a string"},
		{"write data nil", `fs.write("x")`, "data must be a string"},
		{"list a file", `fs.list("a/log.txt")`, "fs.list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, env, `local fs = require("apollo.fs"); `+tt.src, tt.want)
		})
	}
}

func TestFSConfinement(t *testing.T) {
	env := newFakeEnv(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(env.workspace, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(env.workspace, "secretlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.workspace, "in.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("in.txt", filepath.Join(env.workspace, "inlink")); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(env.workspace, secret)
	if err != nil {
		t.Fatal(err)
	}

	refused := []struct{ name, src string }{
		{"dotdot", `fs.read("../x")`},
		{"dotdot to secret", `fs.read("` + rel + `")`},
		{"absolute outside", `fs.read("/etc/passwd")`},
		{"absolute secret", `fs.read("` + secret + `")`},
		{"link to folder out", `fs.read("link/secret.txt")`},
		{"link to file out", `fs.read("secretlink")`},
		{"write through link", `fs.write("link/new.txt", "x")`},
		{"append through link", `fs.append("link/new.txt", "x")`},
		{"mkdir through link", `fs.mkdir("link/d")`},
		{"exists through link", `fs.exists("link/secret.txt")`},
		{"list through link", `fs.list("link")`},
		{"stat through link", `fs.stat("link/secret.txt")`},
		{"remove through link", `fs.remove("link/secret.txt")`},
		{"rename out", `fs.rename("in.txt", "../out.txt")`},
		{"rename through link", `fs.rename("in.txt", "link/out.txt")`},
		{"rename from link", `fs.rename("link/secret.txt", "stolen.txt")`},
		{"idem.write outside", `require("apollo.idem").write("` + filepath.Join(outside, "w.txt") + `", "x")`},
		{"idem.write through link", `require("apollo.idem").write("link/w.txt", "x")`},
		{"idem.replace through link", `require("apollo.idem").replace("link/w.jsonl", "k", {})`},
		{"digest.file out", `require("apollo.digest").file("secretlink")`},
		{"exec dir out", `require("apollo.exec").run({"true"}, {dir = "link"})`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, env, `local fs = require("apollo.fs"); `+tt.src, "outside the workspace and the state directory")
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Errorf("a write went through the link")
	}
	if _, err := os.Stat(filepath.Join(outside, "w.txt")); err == nil {
		t.Errorf("idem.write went outside")
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "top secret" {
		t.Errorf("secret = %q, %v", got, err)
	}

	// Allowed: absolute paths inside the workspace and the state directory, links that stay
	// inside, ".." that stays inside, relative paths that reach the state directory.
	stateRel, err := filepath.Rel(env.workspace, filepath.Join(env.stateDir, "s.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got := mustRun(t, env, `
		local fs = require("apollo.fs")
		fs.write("`+filepath.Join(env.stateDir, "s.txt")+`", "state")
		return {
			fs.read("`+filepath.Join(env.workspace, "in.txt")+`"),
			fs.read("inlink"),
			fs.read("sub/../in.txt"),
			fs.read("`+stateRel+`"),
		}
	`)
	if !jsonEqual(t, got, `["inside", "inside", "inside", "state"]`) {
		t.Errorf("allowed reads = %v", got)
	}
}

// TestFSStateInsideWorkspace covers the usual layout, .apollo/ inside the workspace: both
// areas hold the state directory's files, and rename works between them.
func TestFSStateInsideWorkspace(t *testing.T) {
	env := newFakeEnv(t)
	env.stateDir = filepath.Join(env.workspace, ".apollo")
	got := mustRun(t, env, `
		local fs = require("apollo.fs")
		fs.write(".apollo/artifacts/a.txt", "x")
		fs.rename("`+filepath.Join(env.stateDir, "artifacts/a.txt")+`", "published/a.txt")
		return fs.read("published/a.txt")
	`)
	if got != "x" {
		t.Errorf("read after rename = %v", got)
	}
}

func TestFSRenameAcrossAreas(t *testing.T) {
	env := newFakeEnv(t)
	if err := os.WriteFile(filepath.Join(env.workspace, "a.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, env, `require("apollo.fs").rename("a.txt", "`+filepath.Join(env.stateDir, "a.txt")+`")`,
		"fs.rename", "the workspace", "the state directory")
}

func TestFSReadCap(t *testing.T) {
	env := newFakeEnv(t)
	f, err := os.Create(filepath.Join(env.workspace, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxReadBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantError(t, env, `require("apollo.fs").read("big")`, "fs.read", "larger than the 64 MiB")
}
