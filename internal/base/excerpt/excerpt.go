// Package excerpt cuts the end of a text (a log, a VM console, a child's output) to quote in an
// error message.
package excerpt

import (
	"strings"
	"unicode/utf8"
)

// Tail returns the last maxLines lines of s, then at most its last maxBytes bytes, cut at a
// character boundary and marked with a leading "…". Trailing newlines are dropped first; a
// limit of 0 or less is no limit.
func Tail(s string, maxLines, maxBytes int) string {
	s = strings.TrimRight(s, "\n")
	if maxLines > 0 {
		for i, n := len(s)-1, 0; i >= 0; i-- {
			if s[i] == '\n' {
				if n++; n == maxLines {
					s = s[i+1:]
					break
				}
			}
		}
	}
	if maxBytes > 0 && len(s) > maxBytes {
		cut := len(s) - maxBytes
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		s = "…" + s[cut:]
	}
	return s
}
