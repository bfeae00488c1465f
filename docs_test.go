package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// sectionRef is a reference to a section of the spec: §4, §5.15.
var sectionRef = regexp.MustCompile(`§(\d+(?:\.\d+)?)`)

// specHeading is a numbered heading of docs/spec.md: "## 4. Event log",
// "### 5.15 The cache".
var specHeading = regexp.MustCompile(`^#{2,3} (\d+(?:\.\d+)?)\.? `)

// mdLink is a Markdown link or image: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// TestDocLinks checks what a reader of the documentation follows: every
// §N or §N.M in README.md and docs/ names a numbered heading of
// docs/spec.md, and every relative link there names a file that exists
// and, with a #fragment into a Markdown file, one of its headings.
func TestDocLinks(t *testing.T) {
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	sections := map[string]bool{}
	for _, line := range strings.Split(readDoc(t, "docs/spec.md"), "\n") {
		if m := specHeading.FindStringSubmatch(line); m != nil {
			sections[m[1]] = true
		}
	}
	if len(sections) < 50 {
		t.Fatalf("found %d numbered headings in docs/spec.md, want over 50", len(sections))
	}

	refs, links := 0, 0
	for _, file := range files {
		lines := strings.Split(readDoc(t, file), "\n")
		fenced := false
		for i, line := range lines {
			at := file + ":" + strconv.Itoa(i+1)
			for _, m := range sectionRef.FindAllStringSubmatch(line, -1) {
				refs++
				if !sections[m[1]] {
					t.Errorf("%s: §%s: docs/spec.md has no section %s", at, m[1], m[1])
				}
			}
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(withoutCode(line), -1) {
				links++
				if msg := checkLink(t, file, m[1]); msg != "" {
					t.Errorf("%s: link %s: %s", at, m[1], msg)
				}
			}
		}
	}
	if refs < 100 || links < 50 {
		t.Errorf("checked %d § references and %d links; want over 100 and 50 (is the scan broken?)", refs, links)
	}
}

// checkLink says what is wrong with target, a link in file; "" if nothing.
// Links to other sites are not followed.
func checkLink(t *testing.T, file, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, fragment, _ := strings.Cut(target, "#")
	if path == "" {
		path = file
	} else {
		path = filepath.Join(filepath.Dir(file), path)
	}
	if _, err := os.Stat(path); err != nil {
		return "no such file " + path
	}
	if fragment == "" || !strings.HasSuffix(path, ".md") {
		return ""
	}
	if !anchors(readDoc(t, path))[fragment] {
		return path + " has no heading #" + fragment
	}
	return ""
}

// anchors returns the fragments that name the headings of a Markdown text,
// made as GitHub makes them: lower case, punctuation dropped, spaces as
// hyphens, -1, -2, … after a repeated one.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		title, ok := strings.CutPrefix(line, "#")
		if fenced || !ok {
			continue
		}
		title = strings.TrimSpace(strings.TrimLeft(title, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// withoutCode blanks a line's inline code spans, where brackets are code.
func withoutCode(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "`")
}

// readDoc returns the text of the file at path.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
