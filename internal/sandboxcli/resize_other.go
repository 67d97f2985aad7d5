//go:build !unix

package sandboxcli

import "os"

// notifyResize does nothing where there is no SIGWINCH: the sandbox's terminal keeps the size
// it started with.
func notifyResize(chan<- os.Signal) {}
