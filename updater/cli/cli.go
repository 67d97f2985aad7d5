// Package cli is the `iii update` command line.
package cli

import (
	"fmt"
	"os"
)

// Run runs `iii update ARGS` with the version of the running binary and returns the exit code.
func Run(version string, args []string) int {
	fmt.Fprintln(os.Stderr, "error[NOT_IMPLEMENTED]: iii update is not built yet")
	return 1
}
