package cli

import (
	"fmt"
	"strings"
)

// Words walks command-line words whose flags take their value as --name value or
// --name=value, anywhere among the other words: the scanner of `iii call` and `iii sandbox`,
// so both read a flag's value the same way.
type Words struct {
	args []string
	i    int
	// Arg is the current word; Name is its part before the first "=" (the whole word when it
	// has none), Val the part after and HasVal whether there was one.
	Arg, Name, Val string
	HasVal         bool
}

// NewWords walks args; call Next before reading the first word.
func NewWords(args []string) *Words { return &Words{args: args, i: -1} }

// Next moves to the next word; false when there is none.
func (w *Words) Next() bool {
	w.i++
	if w.i >= len(w.args) {
		return false
	}
	w.Arg = w.args[w.i]
	w.Name, w.Val, w.HasVal = strings.Cut(w.Arg, "=")
	return true
}

// Value is the value of the current flag: what follows its "=", else the next word, which it
// consumes. A flag without one is an error naming it.
func (w *Words) Value() (string, error) {
	if w.HasVal {
		return w.Val, nil
	}
	if w.i+1 >= len(w.args) {
		return "", fmt.Errorf("%s needs a value", w.Name)
	}
	w.i++
	return w.args[w.i], nil
}

// Rest returns the words after the current one and ends the walk.
func (w *Words) Rest() []string {
	rest := w.args[w.i+1:]
	w.i = len(w.args)
	return rest
}
