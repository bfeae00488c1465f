package stdlib

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
		{"remove unknown option", `fs.remove("a", {recursiv = true})`, `unknown option "recursiv" (the options are recursive)`},
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

// TestWritesRefuseLinks: the writing helpers never write through, or replace, a symbolic
// link at the path's last component, even one that stays inside the workspace (a link
// planted in the state folder pointing at the event log, say). Reads still follow links
// that stay inside.
func TestWritesRefuseLinks(t *testing.T) {
	env := newFakeEnv(t)
	victim := filepath.Join(env.stateDir, "victim.jsonl")
	if err := os.WriteFile(victim, []byte(`{"_key":"a"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Relative targets: os.Root takes an absolute one as leading out.
	for name, target := range map[string]string{"inlink": "victim.jsonl", "dangling": "nothing-here"} {
		if err := os.Symlink(target, filepath.Join(env.stateDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"inlink", "dangling"} {
		p := filepath.Join(env.stateDir, name)
		for _, call := range []struct{ name, src string }{
			{"fs.write", `require("apollo.fs").write(%q, "x")`},
			{"fs.append", `require("apollo.fs").append(%q, "x")`},
			{"idem.write", `require("apollo.idem").write(%q, "x")`},
			{"idem.replace", `require("apollo.idem").replace(%q, "k", {{b = 1}})`},
		} {
			t.Run(name+"/"+call.name, func(t *testing.T) {
				wantError(t, env, fmt.Sprintf(call.src, p), call.name, "is a symbolic link")
			})
		}
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != os.ModeSymlink {
			t.Errorf("%s was replaced: %v, %v", name, fi, err)
		}
	}
	if got, _ := os.ReadFile(victim); string(got) != `{"_key":"a"}`+"\n" {
		t.Errorf("the link's target was written: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(env.stateDir, "nothing-here")); err == nil {
		t.Errorf("a write through the dangling link created its target")
	}
	got := mustRun(t, env, `return require("apollo.fs").read("`+filepath.Join(env.stateDir, "inlink")+`")`)
	if got != `{"_key":"a"}`+"\n" {
		t.Errorf("fs.read through a link inside = %q", got)
	}
}

// TestLinkSwapRace swaps a path between a regular file and links (to a file inside the
// workspace, to one outside) while the writing helpers write it: whatever the timing, no
// write lands in a link's target. A second path swaps a folder with a link out. The
// helpers write 300 rounds, 100 under -short.
func TestLinkSwapRace(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 100
	}
	env := newFakeEnv(t)
	outside := filepath.Join(t.TempDir(), "secret")
	victim := filepath.Join(env.workspace, "victim")
	for _, f := range []string{outside, victim} {
		if err := os.WriteFile(f, []byte("untouched"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outDir := t.TempDir()
	p, d := filepath.Join(env.workspace, "p"), filepath.Join(env.workspace, "d")
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		tmp := filepath.Join(env.workspace, "swap.tmp")
		for ; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			os.Remove(tmp)
			switch n % 3 {
			case 0:
				os.WriteFile(tmp, []byte("regular"), 0o644)
			case 1:
				os.Symlink("victim", tmp) // relative: inside the workspace
			case 2:
				os.Symlink(outside, tmp)
			}
			os.Rename(tmp, p)
			// The folder: a real one, then a link out.
			if n%2 == 0 {
				os.RemoveAll(d)
				os.Mkdir(d, 0o755)
			} else {
				os.RemoveAll(d)
				os.Symlink(outDir, d)
			}
		}
	}()
	mustRun(t, env, `
		local fs, idem = require("apollo.fs"), require("apollo.idem")
		for i = 1, `+strconv.Itoa(rounds)+` do
			pcall(fs.write, "p", "w")
			pcall(fs.append, "p", "a")
			pcall(idem.write, "p", "i")
			pcall(idem.replace, "p", "k", {{i = i}})
			pcall(fs.write, "d/f", "w")
			pcall(idem.write, "d/g", "i")
			pcall(idem.replace, "d/h", "k", {{i = i}})
		end
	`)
	close(stop)
	t.Logf("%d swaps", <-swapped)
	for _, f := range []string{outside, victim} {
		if got, _ := os.ReadFile(f); string(got) != "untouched" {
			t.Errorf("%s = %q: a write went through a link", f, got)
		}
	}
	if names, _ := os.ReadDir(outDir); len(names) != 0 {
		t.Errorf("writes landed outside, through the swapped folder: %v", names)
	}
}
