package vm

// BootError is a failed boot: Detail says what went wrong, with the tail of the VM console when
// there is one, and Err is the cause.
type BootError struct {
	Detail string
	Err    error
}

func (e *BootError) Error() string { return "VM boot failed: " + e.Detail }

// Unwrap returns the cause of the failed boot.
func (e *BootError) Unwrap() error { return e.Err }
