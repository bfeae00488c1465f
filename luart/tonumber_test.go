package luart

import (
	"bytes"
	"testing"
)

// TestToNumber: tonumber reads numeric strings as Lua 5.1 does — an exponent
// included, which gopher-lua's own reads as nil — and nothing else.
func TestToNumber(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := newState(t, New(Options{}), StateOptions{Print: &out})
	_, err := s.DoChunk("tonumber.lua", `
		for _, v in ipairs({"1e3", "5e-07", " 42 ", "-1.5", "+7", ".5", "5.", "0x1F", "-0x10", "1E+2", 12,
		                    "", " ", "abc", "1e", "e3", "inf", "nan", "1_000", "0x", "1 2", "- 5", "0x1p3"}) do
			print(tostring(tonumber(v)))
		end
		print(tonumber("ff", 16), tonumber("777", 8), tonumber(" 101 ", 2), tonumber("zz", 36), tonumber(10, 16))
		print(tonumber("8", 8), tonumber("", 10), tonumber({}), tonumber(nil))
		print(pcall(tonumber, "1", 1))`)
	if err != nil {
		t.Fatal(err)
	}
	want := "1000\n5e-07\n42\n-1.5\n7\n0.5\n5\n31\n-16\n100\n12\n" +
		"nil\nnil\nnil\nnil\nnil\nnil\nnil\nnil\nnil\nnil\nnil\nnil\n" +
		"255\t511\t5\t1295\t16\n" +
		"nil\tnil\tnil\tnil\n" +
		"false\ttonumber.lua:8: bad argument #2 to 'tonumber' (base out of range)\n"
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
