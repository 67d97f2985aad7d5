//go:build !linux

package testscripts

import "github.com/rogpeppe/go-internal/testscript"

func init() {
	registerCmd("watchopen", func(ts *testscript.TestScript, neg bool, args []string) {
		ts.Fatalf("watchopen: needs Linux inotify, not available on this OS")
	})
}
