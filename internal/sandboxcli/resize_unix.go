//go:build unix

package sandboxcli

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyResize delivers the local terminal's window changes to c.
func notifyResize(c chan<- os.Signal) { signal.Notify(c, syscall.SIGWINCH) }
