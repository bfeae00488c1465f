package textfmt

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"sync"
)

// Masked is what a secret's value is replaced by.
const Masked = "***"

// minSecret is the shortest value masked: a shorter one would mask
// ordinary text everywhere (and say what the value is).
const minSecret = 3

// Masker replaces secret values with *** in the text apollo prints and
// records. The zero Masker (or nil) masks nothing.
type Masker struct {
	values []string // longest first, so a value inside another is masked whole
	first  [256]bool
	max    int
}

// NewMasker masks values (empty and very short ones are left out); nil when
// there is nothing to mask.
func NewMasker(values ...string) *Masker {
	m := &Masker{}
	for _, v := range values {
		if len(v) >= minSecret && !slices.Contains(m.values, v) {
			m.values = append(m.values, v)
			m.first[v[0]] = true
			m.max = max(m.max, len(v))
		}
	}
	if len(m.values) == 0 {
		return nil
	}
	slices.SortFunc(m.values, func(a, b string) int { return len(b) - len(a) })
	return m
}

// String masks s.
func (m *Masker) String(s string) string {
	if m == nil {
		return s
	}
	for _, v := range m.values {
		s = strings.ReplaceAll(s, v, Masked)
	}
	return s
}

// Writer masks what is written through it before w sees it, secrets split
// across writes included: bytes that may begin a secret wait for the next
// write, or Close. It is safe for concurrent use.
func (m *Masker) Writer(w io.Writer) *MaskWriter {
	return &MaskWriter{m: m, w: w}
}

// MaskWriter is a Masker's writer. Close writes what waits; it does not
// close the underlying writer.
type MaskWriter struct {
	m    *Masker
	w    io.Writer
	mu   sync.Mutex
	pend []byte
}

func (mw *MaskWriter) Write(p []byte) (int, error) {
	if mw.m == nil {
		return mw.w.Write(p)
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	buf := append(mw.pend, p...)
	out, rest := mw.m.scan(buf, false)
	mw.pend = append(mw.pend[:0:0], rest...)
	if len(out) > 0 {
		if _, err := mw.w.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Close writes what waits, masked.
func (mw *MaskWriter) Close() error {
	if mw.m == nil {
		return nil
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	out, _ := mw.m.scan(mw.pend, true)
	mw.pend = nil
	if len(out) == 0 {
		return nil
	}
	_, err := mw.w.Write(out)
	return err
}

// scan masks buf. Unless final, it stops where the rest could be the start
// of a secret and returns that rest to wait for more.
func (m *Masker) scan(buf []byte, final bool) (out, rest []byte) {
	out = make([]byte, 0, len(buf))
	for i := 0; i < len(buf); {
		if !m.first[buf[i]] {
			j := i + 1
			for j < len(buf) && !m.first[buf[j]] {
				j++
			}
			out = append(out, buf[i:j]...)
			i = j
			continue
		}
		matched, partial := false, false
		for _, v := range m.values {
			switch {
			case bytes.HasPrefix(buf[i:], []byte(v)):
				out = append(out, Masked...)
				i += len(v)
				matched = true
			case !final && len(buf)-i < len(v) && strings.HasPrefix(v, string(buf[i:])):
				partial = true
			}
			if matched {
				break
			}
		}
		switch {
		case matched:
		case partial:
			return out, buf[i:]
		default:
			out = append(out, buf[i])
			i++
		}
	}
	return out, nil
}

// Values are the values m masks, to make the same Masker elsewhere.
func (m *Masker) Values() []string {
	if m == nil {
		return nil
	}
	return slices.Clone(m.values)
}
