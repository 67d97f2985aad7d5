package errcode

import (
	"errors"
	"fmt"
)

// Error is a Compose failure with its documented code. The CLI prints it as
// error[CODE]: message; compose::* callers receive {code, message}.
type Error struct {
	Code    string
	Message string
}

// Error returns "CODE: message".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// New returns an *Error with a formatted message.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Code returns the code of the first *Error in err's chain, or "" when there is none.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// As returns err as an *Error, wrapping an uncoded error under fallback.
func As(err error, fallback string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: fallback, Message: err.Error()}
}
