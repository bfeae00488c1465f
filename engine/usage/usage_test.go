package usage

import (
	"errors"
	"fmt"
	"testing"
)

// TestErrorf: the message is formatted, and a wrapped *Error is still found
// (main maps it to exit 2).
func TestErrorf(t *testing.T) {
	err := fmt.Errorf("run: %w", Errorf("--parallel %d: must be at least 1", 0))
	var ue *Error
	if !errors.As(err, &ue) || ue.Msg != "--parallel 0: must be at least 1" {
		t.Fatalf("errors.As(%v) = %v, want the usage error", err, ue)
	}
}
