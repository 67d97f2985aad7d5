package errcode

import (
	"errors"
	"fmt"
)

// Error is an error that carries one of this package's codes.
type Error struct {
	Code    string
	Message string
}

// Error returns the message without the code; the CLI adds the code when it prints.
func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Of returns the code carried by err, or "" when it has none.
func Of(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
