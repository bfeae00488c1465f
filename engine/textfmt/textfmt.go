package textfmt

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Duration rounds d to what a person reads: whole seconds from a minute on,
// tenths of a second from a second on, else milliseconds.
func Duration(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}

// OneLine folds s onto one line (newlines become " | ") and cuts it after
// limit bytes, marking the cut with "…".
func OneLine(s string, limit int) string {
	s = strings.ReplaceAll(s, "\n", " | ")
	if len(s) > limit {
		s = s[:limit] + "…"
	}
	return s
}

// Bytes writes n as B, KiB or MiB.
func Bytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// WriteJSON writes v as indented JSON, with <, > and & as they are: the
// shape of every --json output.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
