package errcode

import (
	"io"

	"github.com/iii-go/iii/internal/base/errcode"
)

// Error is the coded error every module shares (internal/base/errcode.Error). The CLI prints it as
// error[CODE]: message; compose::* callers receive {code, message}.
type Error = errcode.Error

// New returns an *Error with code and a message built like fmt.Errorf (%w keeps the cause).
func New(code, format string, args ...any) *Error { return errcode.New(code, format, args...) }

// CodeOf returns the code of the first *Error in err's chain, or "" when there is none.
func CodeOf(err error) string { return errcode.CodeOf(err) }

// As returns the first *Error in err's chain, or err under the fallback code.
func As(err error, fallback string) *Error { return errcode.As(err, fallback) }

// Usagef is New for a mistake in the command line: Exit returns 2 for it.
func Usagef(code, format string, args ...any) *Error { return errcode.Usagef(code, format, args...) }

// Exit prints err as error[CODE]: message (IO_ERROR when it has no code) and returns the exit
// status of iii compose: 0 for nil, 2 for a usage error, 1 otherwise.
func Exit(w io.Writer, err error) int { return errcode.Exit(w, err, IOError) }
