// Package cli holds the engine's command-line entry points: the engine itself and `iii call`.
package cli

import (
	"fmt"
	"os"
)

// RunEngine runs the engine with the given arguments and returns the process exit code.
func RunEngine(version string, args []string) int {
	fmt.Fprintln(os.Stderr, "error[NOT_IMPLEMENTED]: the engine is not built yet")
	return 1
}

// RunCall runs `iii call FN k=v ...` and returns the process exit code.
func RunCall(args []string) int {
	fmt.Fprintln(os.Stderr, "error[NOT_IMPLEMENTED]: iii call is not built yet")
	return 1
}
