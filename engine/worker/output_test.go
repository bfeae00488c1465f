package worker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"apollo/engine/remote"
)

// BenchmarkStreamerStop ends the output streaming of an attempt that
// printed nothing (a `true` step), as every such attempt does before its
// end is reported; -benchmem shows what it allocates.
func BenchmarkStreamerStop(b *testing.B) {
	path := filepath.Join(b.TempDir(), "out")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s := newStreamer(nil, &remote.Work{}, path)
		if sent, tail, err := s.stop(true); sent != 0 || tail != nil || err != nil {
			b.Fatalf("stop: sent %d, tail %q, %v", sent, tail, err)
		}
	}
}

// TestStreamerTail: the end of an attempt carries what it printed when
// that is at most remote.MaxTail bytes, and nothing when it printed
// nothing or its output file was never made.
func TestStreamerTail(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		printed []byte // nil: no file
	}{
		{"no file", nil},
		{"empty", []byte{}},
		{"short", []byte("done\n")},
		{"the most an end carries", bytes.Repeat([]byte("x"), remote.MaxTail)},
	} {
		path := filepath.Join(dir, c.name)
		if c.printed != nil {
			if err := os.WriteFile(path, c.printed, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s := newStreamer(nil, &remote.Work{}, path)
		sent, tail, err := s.stop(true)
		if sent != 0 || err != nil || !bytes.Equal(tail, c.printed) || (len(c.printed) == 0) != (tail == nil) {
			t.Errorf("%s: stop gave sent %d, a tail of %d bytes, %v; want nothing sent and a tail of %d bytes",
				c.name, sent, len(tail), err, len(c.printed))
		}
	}
}
