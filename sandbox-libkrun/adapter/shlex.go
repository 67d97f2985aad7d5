package adapter

import (
	"errors"
	"strings"
)

var errUnbalanced = errors.New("unbalanced quotes")

// shlexSplit splits a command line the way a POSIX shell splits words, without any expansion:
// whitespace separates words, single quotes are literal, double quotes allow \" \\ \$ \` escapes,
// and a backslash outside quotes escapes the next character.
func shlexSplit(line string) ([]string, error) {
	var (
		words   []string
		cur     strings.Builder
		inWord  bool
		runes   = []rune(line)
		isSpace = func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f' }
	)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case isSpace(r):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '\\':
			inWord = true
			if i+1 >= len(runes) {
				return nil, errUnbalanced
			}
			i++
			if runes[i] != '\n' {
				cur.WriteRune(runes[i])
			}
		case r == '\'':
			inWord = true
			j := i + 1
			for j < len(runes) && runes[j] != '\'' {
				j++
			}
			if j >= len(runes) {
				return nil, errUnbalanced
			}
			cur.WriteString(string(runes[i+1 : j]))
			i = j
		case r == '"':
			inWord = true
			j := i + 1
			for ; j < len(runes) && runes[j] != '"'; j++ {
				if runes[j] == '\\' && j+1 < len(runes) && strings.ContainsRune("\"\\$`\n", runes[j+1]) {
					j++
					if runes[j] != '\n' {
						cur.WriteRune(runes[j])
					}
					continue
				}
				cur.WriteRune(runes[j])
			}
			if j >= len(runes) {
				return nil, errUnbalanced
			}
			i = j
		default:
			inWord = true
			cur.WriteRune(r)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
