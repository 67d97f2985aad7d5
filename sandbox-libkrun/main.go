// Command sandbox-libkrun is the sandbox adapter worker: it serves <prefix>::* for the engine's
// sandbox router and runs each sandbox in a microVM.
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=..." from sandbox-libkrun/VERSION.
var version = "0.0.0-dev"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "--version" || os.Args[1] == "-V") {
		fmt.Println(version)
		return
	}
	fmt.Fprintln(os.Stderr, "error[NOT_IMPLEMENTED]: the adapter is not built yet")
	os.Exit(1)
}
