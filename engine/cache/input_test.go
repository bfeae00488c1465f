package cache

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestHashInput checks what a folder's digest answers to: each change a
// step could read changes it, and nothing else does; a missing path is
// ErrInputMissing and a named pipe inside is an error of its own.
func TestHashInput(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "in")
	write := func(rel, content string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "a", 0o644)
	write("sub/b.txt", "bb", 0o644)
	digest := func() string {
		t.Helper()
		d, _, err := HashInput(root)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	base := digest()
	if _, size, _ := HashInput(root); size != 3 {
		t.Errorf("size %d, want 3 (the files' bytes)", size)
	}
	seen := map[string]string{base: "the folder as made"}
	changed := func(what string) {
		t.Helper()
		d := digest()
		if prev, ok := seen[d]; ok {
			t.Errorf("%s: the digest is the same as for %s", what, prev)
		}
		seen[d] = what
	}
	// Rewriting a file with its own content and mode changes nothing.
	write("a.txt", "a", 0o644)
	if digest() != base {
		t.Error("rewriting a file with the same content changed the digest")
	}
	write("sub/b.txt", "bc", 0o644)
	changed("a changed file")
	if err := os.Rename(filepath.Join(root, "sub", "b.txt"), filepath.Join(root, "sub", "c.txt")); err != nil {
		t.Fatal(err)
	}
	changed("a renamed file")
	write("a.txt", "a", 0o755)
	changed("a file made executable")
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	changed("an empty folder added")
	if err := os.Symlink("/etc/hostname", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	changed("a link added")
	if err := os.Remove(filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	changed("a link pointed elsewhere")

	// A link at the path itself is followed, as for a file.
	if err := os.Symlink("in", filepath.Join(dir, "via")); err != nil {
		t.Fatal(err)
	}
	if d, _, err := HashInput(filepath.Join(dir, "via")); err != nil || d != digest() {
		t.Errorf("through a link: %q, %v; want the folder's digest", d, err)
	}

	for _, missing := range []string{filepath.Join(dir, "nothing"), filepath.Join(root, "a.txt", "under-a-file")} {
		if _, _, err := HashInput(missing); !errors.Is(err, ErrInputMissing) {
			t.Errorf("%s: %v, want ErrInputMissing", missing, err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, _, err := HashInput(root); err == nil || errors.Is(err, ErrInputMissing) {
		t.Errorf("a folder holding a named pipe: %v, want an error that is not ErrInputMissing", err)
	}
}
