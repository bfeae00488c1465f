package stdlib

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
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
		f, _, err := openRead(r, rel, "")
		if err != nil {
			return err
		}
		defer f.Close()
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
