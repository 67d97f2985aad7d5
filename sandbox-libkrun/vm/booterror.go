package vm

import "errors"

// BootError is a failed boot: Detail says what went wrong, with the tail of the VM console when
// there is one, and Err is the cause.
type BootError struct {
	Detail string
	Err    error
}

func (e *BootError) Error() string { return "VM boot failed: " + e.Detail }

// Unwrap returns the cause of the failed boot.
func (e *BootError) Unwrap() error { return e.Err }

// BootDetail is what a failed boot's error says for a user: a BootError's Detail, else the
// error's text.
func BootDetail(err error) string {
	if be := (*BootError)(nil); errors.As(err, &be) {
		return be.Detail
	}
	return err.Error()
}
