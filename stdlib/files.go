package stdlib

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// errEscapes is os.Root's error for a path that leaves the root. os does not export it, so
// it is taken from os.Root itself, once, and errors are matched against it by identity
// rather than by their text.
var errEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot(string(filepath.Separator))
	if err != nil {
		return nil
	}
	defer r.Close()
	_, err = r.Lstat("..")
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return nil
})

// isEscape reports os.Root's refusal of a path that leaves the root.
func isEscape(err error) bool {
	esc := errEscapes()
	return esc != nil && errors.Is(err, esc)
}
