// Package cli is the `iii compose` command line.
package cli

import (
	"fmt"
	"os"
)

// Run runs `iii compose ARGS` and returns the process exit code.
func Run(version string, args []string) int {
	fmt.Fprintln(os.Stderr, "error[NOT_IMPLEMENTED]: iii compose is not built yet")
	return 1
}
