package stdlib

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"

	lua "github.com/yuin/gopher-lua"
)

func (lib *library) digestFuncs() map[string]lua.LGFunction {
	return map[string]lua.LGFunction{
		"sha256": digestString,
		"file":   lib.digestFile,
	}
}

// Digest returns "sha256:<hex>" of data, the form of the event log's digests.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func digestString(L *lua.LState) int {
	s := checkString(L, "digest.sha256", 1, "data")
	L.Push(lua.LString(Digest([]byte(s))))
	return 1
}

func (lib *library) digestFile(L *lua.LState) int {
	ctx := stepContext(L)
	var sum string
	lib.at(L, "digest.file", func(r *os.Root, rel string) error {
		f, err := r.Open(rel)
		if err != nil {
			return err
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return &fs.PathError{Op: "read", Path: rel, Err: errors.New("is a folder")}
		}
		h := sha256.New()
		if _, err := io.CopyBuffer(h, &ctxReader{ctx: ctx, r: f}, make([]byte, 1<<20)); err != nil {
			return err
		}
		sum = "sha256:" + hex.EncodeToString(h.Sum(nil))
		return nil
	})
	L.Push(lua.LString(sum))
	return 1
}

// ctxReader stops reading when ctx ends, so a long digest honours the step's timeout.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}
