package vm

import (
	"errors"
	"io/fs"
	"testing"
)

func TestBootError(t *testing.T) {
	err := error(&BootError{Detail: "root filesystem \"/x\" is not a directory", Err: fs.ErrNotExist})
	if got := err.Error(); got != "VM boot failed: root filesystem \"/x\" is not a directory" {
		t.Fatalf("Error() = %q", got)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("BootError does not unwrap to its cause")
	}
}
