//go:build unix

package stdlib

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"apollo/luart"
)

// pathCalls is every apollo.* call that takes a path, as Lua with %[1]q for the path.
// special is what a FIFO, a socket and a character device give ("" for success), sparse
// what a 64 GiB sparse file gives ("*": any error, such as the step's timeout).
var pathCalls = []struct {
	name, src       string
	special, sparse string
}{
	{"fs.read", `fs.read(%[1]q)`, "not a regular file", "larger than the 64 MiB"},
	{"fs.read under", `fs.read(%[1]q .. "/x")`, "fs.read", "fs.read"},
	{"fs.write", `fs.write(%[1]q, "x")`, "not a regular file", ""},
	{"fs.write under", `fs.write(%[1]q .. "/x", "x")`, "in the way", "in the way"},
	{"fs.append", `fs.append(%[1]q, "x")`, "not a regular file", ""},
	{"fs.exists", `assert(fs.exists(%[1]q))`, "", ""},
	{"fs.stat", `assert(not fs.stat(%[1]q).is_dir)`, "", ""},
	{"fs.list", `fs.list(%[1]q)`, "fs.list", "fs.list"},
	{"fs.mkdir", `fs.mkdir(%[1]q)`, "in the way", "in the way"},
	{"fs.remove", `fs.remove(%[1]q); assert(not fs.exists(%[1]q))`, "", ""},
	{"fs.remove recursive", `fs.remove(%[1]q, {recursive = true}); assert(not fs.exists(%[1]q))`, "", ""},
	{"fs.rename from", `fs.rename(%[1]q, "moved")`, "", ""},
	{"fs.rename to", `fs.write("src.txt", "x"); fs.rename("src.txt", %[1]q)`, "", ""},
	{"idem.write", `idem.write(%[1]q, "x")`, "not a regular file", ""},
	{"idem.replace", `idem.replace(%[1]q, "k", {{a = 1}})`, "not a regular file", "larger than the 1024 MiB"},
	{"digest.file", `digest.file(%[1]q)`, "not a regular file", "*"},
	{"exec.run dir", `exec.run({"true"}, {dir = %[1]q})`, "not a folder", "not a folder"},
}

// pathlessCalls are the apollo.* functions that take no path.
var pathlessCalls = []string{
	"idem.key", "idem.once", "idem.resource", "digest.sha256", "json.encode", "json.decode",
	"log.info", "log.warn", "log.error", "http.request", "http.get", "http.post",
}

// TestPathCallsCovered keeps pathCalls complete: a new apollo.* function must be listed
// there (and so tested on special files) or in pathlessCalls.
func TestPathCallsCovered(t *testing.T) {
	env := newFakeEnv(t)
	var listed []string
	for _, c := range pathCalls {
		listed = append(listed, strings.Fields(c.name)[0])
	}
	for mod := range Modules(env) {
		short := strings.TrimPrefix(mod, "apollo.")
		got := mustRun(t, env, fmt.Sprintf(`
			local names = {}
			for k, v in pairs(require(%q)) do
				if type(v) == "function" then names[#names + 1] = k end
			end
			return names`, mod))
		for _, n := range got.([]any) {
			name := short + "." + n.(string)
			if !slices.Contains(listed, name) && !slices.Contains(pathlessCalls, name) {
				t.Errorf("%s is in neither pathCalls (tested on special files) nor pathlessCalls", name)
			}
		}
	}
}

// makeSpecial makes a file of kind at path: "fifo", "socket", "device" (a character device
// like /dev/zero) or "sparse" (64 GiB of holes). It returns a function that releases what
// may be blocked on it.
func makeSpecial(t *testing.T, kind, path string) (release func()) {
	t.Helper()
	switch kind {
	case "fifo":
		if err := unix.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
		// Opening both ends wakes an open that waits for the other one; closing them ends
		// a read that waits for data.
		return func() {
			if fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK, 0); err == nil {
				unix.Write(fd, []byte("x\n"))
				unix.Close(fd)
			}
		}
	case "socket":
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	case "device":
		err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))) // /dev/zero
		if errors.Is(err, unix.EPERM) {
			t.Skipf("cannot make a device node here: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
	case "sparse":
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(64 << 30); err != nil {
			f.Close()
			t.Skipf("cannot make a 64 GiB sparse file here: %v", err)
		}
		f.Close()
	}
	return func() {}
}

// TestSpecialFiles calls every apollo.* function that takes a path on a FIFO, a socket, a
// character device and a huge sparse file, each with a short step timeout: each call must
// end within the timeout (with the expected error or result), never hang the step.
func TestSpecialFiles(t *testing.T) {
	t.Parallel() // waits out grace periods of its own
	for _, kind := range []string{"fifo", "socket", "device", "sparse"} {
		for _, c := range pathCalls {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				env := newFakeEnv(t)
				// Short: a socket's path must fit in 108 bytes.
				path := filepath.Join(env.workspace, "p")
				release := makeSpecial(t, kind, path)
				want := c.special
				if kind == "sparse" {
					want = c.sparse
				}
				// A call that ends by itself gets a step time limit a loaded
				// machine cannot reach (one second was, in CI); a call whose
				// end may be the limit ("*") gets one second.
				timeout := 10 * time.Second
				if want == "*" {
					timeout = time.Second
				}
				src := `local fs, idem = require("apollo.fs"), require("apollo.idem")
					local digest, exec = require("apollo.digest"), require("apollo.exec")
					` + fmt.Sprintf(c.src, "p")

				ctx, cancel := context.WithTimeoutCause(t.Context(), timeout, luart.ErrTimeout)
				defer cancel()
				type outcome struct {
					err     error
					elapsed time.Duration
				}
				done := make(chan outcome, 1)
				go func() {
					start := time.Now()
					_, err := runLuaCtx(t, ctx, env, src)
					done <- outcome{err, time.Since(start)}
				}()
				var got outcome
				select {
				case got = <-done:
				case <-time.After(timeout + 10*time.Second):
					t.Errorf("%s on a %s hung past its %s timeout", c.name, kind, timeout)
					release()
					select {
					case <-done:
					case <-time.After(5 * time.Second):
						t.Errorf("%s on a %s cannot be released; its goroutine is left running", c.name, kind)
					}
					return
				}
				if got.elapsed > timeout+2*time.Second {
					t.Errorf("%s on a %s took %s, past its %s timeout", c.name, kind, got.elapsed, timeout)
				}
				switch {
				case want == "" && got.err != nil:
					t.Errorf("%s on a %s: %v, want success", c.name, kind, got.err)
				case want == "":
				case got.err == nil:
					t.Errorf("%s on a %s succeeded, want an error containing %q", c.name, kind, want)
				case want != "*" && !strings.Contains(got.err.Error(), want):
					t.Errorf("%s on a %s: %v, want an error containing %q", c.name, kind, got.err, want)
				}
			})
		}
	}
}
