package errcode

import (
	"io"

	"github.com/iii-go/iii/internal/base/errcode"
)

// Error is the coded error every module shares (internal/base/errcode.Error).
type Error = errcode.Error

// New returns an *Error with code and a message built like fmt.Errorf (%w keeps the cause).
func New(code, format string, args ...any) *Error { return errcode.New(code, format, args...) }

// Usagef is New for a mistake in the command line: Exit returns 2 for it.
func Usagef(code, format string, args ...any) *Error { return errcode.Usagef(code, format, args...) }

// CodeOf returns the code of the first *Error in err's chain, or "" when there is none.
func CodeOf(err error) string { return errcode.CodeOf(err) }

// Exit prints err as error[CODE]: message (INVALID_ARGUMENTS when it has no code) and returns
// the exit status of `iii update`: 0 for nil, 2 for a usage error, 1 otherwise.
func Exit(w io.Writer, err error) int { return errcode.Exit(w, err, InvalidArguments) }

// Line is the failure line of err: error[CODE]: message, or error: text without a code.
func Line(err error) string { return errcode.Line(err) }
