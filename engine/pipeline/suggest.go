package pipeline

import (
	"fmt"
	"strings"
)

// DidYouMean returns ` (did you mean "x"?)` for the candidate closest to
// word, or "" when none is close enough to be a plausible typo.
func DidYouMean(word string, candidates []string) string {
	if s := Suggest(word, candidates); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// Suggest returns the candidate closest to word: the same word in another
// case, else (for words of 3 bytes or more) the nearest by edit distance
// (transpositions count once) within a third of the word's length, else a
// candidate that word begins. Ties go to the earlier candidate.
func Suggest(word string, candidates []string) string {
	if word == "" || len(word) > 100 {
		return ""
	}
	lw := strings.ToLower(word)
	for _, c := range candidates {
		if c != word && strings.ToLower(c) == lw {
			return c
		}
	}
	if len(word) < 3 {
		return ""
	}
	limit := max(1, min(3, len(word)/3))
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if c == word || len(c) > len(word)+limit || len(c) < len(word)-limit {
			continue
		}
		if d := editDistance(lw, strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best != "" {
		return best
	}
	for _, c := range candidates {
		if c != word && strings.HasPrefix(strings.ToLower(c), lw) {
			return c
		}
	}
	return ""
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of adjacent bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// snippet shortens s to its first line and at most 30 bytes, for messages.
func snippet(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 30 {
		s = s[:30] + "..."
	}
	return s
}

// isNameChar reports whether c may appear in a name: a letter, a digit or _.
func isNameChar(c int) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}
