package errcode

import (
	"errors"
	"fmt"
	"io"
)

// Error is a failure with its documented code, the one coded error type of every module. CLIs
// print it as error[CODE]: message; function errors carry it as {code, message}.
type Error struct {
	// Code is one of the documented codes (this package's, compose's, the updater's, ...).
	Code string
	// Message says what failed and names the file, key, namespace or command to look at.
	Message string
	// Err is the cause, when the message was built from one with %w.
	Err error
	// Usage marks a command-line mistake: Exit returns 2 for it instead of 1.
	Usage bool
}

var _ error = (*Error)(nil)

// Error returns "CODE: message", so a log line or a wrapping message keeps the code; CLIs and
// function errors print the two fields apart (error[CODE]: message, {code, message}).
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the cause, so errors.Is and errors.As see through a coded error.
func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error whose message is fmt.Errorf(format, args...); a %w verb makes that
// argument the cause, and several %w verbs make all of them causes.
func New(code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	cause := errors.Unwrap(err)
	if _, many := err.(interface{ Unwrap() []error }); many {
		cause = err
	}
	return &Error{Code: code, Message: err.Error(), Err: cause}
}

// Usagef is New for a command-line mistake (a bad flag, a missing argument): Exit returns 2.
func Usagef(code, format string, args ...any) *Error {
	e := New(code, format, args...)
	e.Usage = true
	return e
}

// CodeOf returns the code of the first *Error in err's chain, or "" when there is none.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// As returns the first *Error in err's chain, or err under the fallback code when it has none.
func As(err error, fallback string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: fallback, Message: err.Error(), Err: err}
}

// Exit is how every CLI ends: for a nil err it returns 0; otherwise it prints
// error[CODE]: message to w (the first *Error of err's chain, else err under fallback) and
// returns 2 for a usage error, 1 for any other.
func Exit(w io.Writer, err error, fallback string) int {
	if err == nil {
		return 0
	}
	e := As(err, fallback)
	fmt.Fprintln(w, Line(e))
	if e.Usage {
		return 2
	}
	return 1
}

// Line is the failure line a CLI prints for err: error[CODE]: message for a coded error, or
// error: text for one without a code.
func Line(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return "error: " + err.Error()
	}
	return "error[" + e.Code + "]: " + e.Message
}
